// Fuzzes the disk-cache entry parser (internal::ParseEntry) and, on the same
// bytes put in a file, DiskCache::Read. Inputs are raw entry files, or are
// assembled from fuzzed parts with correct lengths and checksums (so that
// the header parsing behind the checksums is reached), or are the canonical
// entry with one header line edited. The parser must never read outside the
// bytes (ASan), must load a payload only when every documented check passes,
// and Read must give the same verdict as ParseEntry.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/disk_cache.h"
#include "fuzz_input.h"

namespace tailor::internal {
namespace {

using fuzz::FuzzInput;

const EntryIdentity& Identity() {
  static const EntryIdentity* id =
      new EntryIdentity{.tailor_version = "0.1.0",
                        .compiler = "clang-14 -O3 -march=znver3",
                        .arch = "x86_64-znver3",
                        .spec = "moe.pack/cpu/x86_64-znver3/bf16/H=64",
                        .spec_hash = HashBytes("spec"),
                        .source_hash = HashBytes("source"),
                        .headers_hash = HashBytes("headers")};
  return *id;
}

std::vector<std::string> HeaderLines(absl::string_view payload) {
  const EntryIdentity& id = Identity();
  return {absl::StrCat("tailor_version=", id.tailor_version),
          absl::StrCat("compiler=", id.compiler),
          absl::StrCat("arch=", id.arch),
          absl::StrCat("spec=", id.spec),
          absl::StrCat("spec_hash=", id.spec_hash.Hex()),
          absl::StrCat("source_hash=", id.source_hash.Hex()),
          absl::StrCat("headers_hash=", id.headers_hash.Hex()),
          absl::StrCat("payload_size=", payload.size()),
          absl::StrCat("payload_xxh3=", Checksum64(payload))};
}

std::string Le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

// The file layout of disk_cache.h with a correct header checksum.
std::string Assemble(uint32_t version, absl::string_view header,
                     absl::string_view payload) {
  return absl::StrCat("TAILORKC", Le(version, 4), Le(header.size(), 4), header,
                      Le(Checksum64(header), 8), payload);
}

struct Entry {
  std::string bytes;
  bool canonical = false;  // exactly what Write produces for Identity()
};

Entry MakeEntry(FuzzInput& in) {
  switch (in.InRange(0, 2)) {
    case 0:
      return {in.Rest()};
    case 1: {  // fuzzed header text and payload, consistent framing
      std::string header = in.Bytes(512);
      return {Assemble(kDiskFormatVersion, header, in.Rest())};
    }
    default: {  // the canonical entry, maybe with one line edited
      std::string payload = in.Bytes(256);
      std::vector<std::string> lines = HeaderLines(payload);
      const bool edit = in.Bool();
      if (edit) {
        size_t line = in.InRange(0, lines.size() - 1);
        switch (in.InRange(0, 3)) {
          case 0:
            lines.erase(lines.begin() + line);
            break;
          case 1:
            lines.push_back(lines[line]);  // a duplicate
            break;
          case 2: {
            std::pair<std::string, std::string> kv =
                absl::StrSplit(lines[line], absl::MaxSplits('=', 1));
            lines[line] = kv.first + "=" + in.Bytes(40);
            break;
          }
          default:
            lines.insert(lines.begin() + line, in.Bytes(40));
        }
      }
      std::string header;
      for (const std::string& l : lines) absl::StrAppend(&header, l, "\n");
      uint32_t version = in.OneIn(8) ? in.Take<uint32_t>() : kDiskFormatVersion;
      return {Assemble(version, header, payload),
              !edit && version == kDiskFormatVersion};
    }
  }
}

// A cache directory for the Read half, removed at exit.
const DiskCache& Cache() {
  static std::string* dir = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tailor-fuzz-XXXXXX")
            .string();
    auto* d = new std::string(mkdtemp(pattern.data()));
    std::atexit([] { std::filesystem::remove_all(*dir); });
    return d;
  }();
  static const DiskCache* cache = new DiskCache(DiskCache::Open(*dir).value());
  return *cache;
}

}  // namespace
}  // namespace tailor::internal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::internal;
  tailor::fuzz::FuzzInput in(data, size);
  const bool through_a_file = in.OneIn(4);  // files cost a syscall or five
  const Entry entry = MakeEntry(in);
  const ReadResult parsed = ParseEntry(entry.bytes, Identity());
  FUZZ_CHECK(parsed.problem != EntryProblem::kMissing);
  if (parsed.problem == EntryProblem::kNone) {
    // The payload is the tail of the file, and its checksum is in the header.
    FUZZ_CHECK(entry.bytes.size() >= parsed.payload.size() &&
               entry.bytes.compare(entry.bytes.size() - parsed.payload.size(),
                                   parsed.payload.size(), parsed.payload) == 0);
    FUZZ_CHECK(entry.bytes.find(absl::StrCat(
                   "payload_xxh3=", Checksum64(parsed.payload), "\n")) !=
               std::string::npos);
  } else {
    FUZZ_CHECK(parsed.payload.empty());
    FUZZ_CHECK(!parsed.detail.empty());
  }
  if (entry.canonical) {
    FUZZ_CHECK(parsed.problem == EntryProblem::kNone) << parsed.detail;
  }

  if (!through_a_file) return 0;
  const DiskCache& cache = Cache();
  {
    std::ofstream out(cache.EntryPath("k", Identity()),
                      std::ios::binary | std::ios::trunc);
    out << entry.bytes;
  }
  const ReadResult read = cache.Read("k", Identity());
  FUZZ_CHECK(read.problem == parsed.problem && read.payload == parsed.payload)
      << read.detail << " vs " << parsed.detail;
  return 0;
}
