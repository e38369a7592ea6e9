// The entry format of core/disk_cache.h: how an entry is encoded, and the
// one validator that the runtime (DiskCache::Read, against the identity it
// expects) and the tools (InspectEntryFile, against the identity the header
// states and the file's name) share.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/disk_cache.h"

namespace tailor::internal {
namespace {

constexpr absl::string_view kMagic = "TAILORKC";
// Tools checksum a payload in chunks of this size: what verifying an entry
// costs in memory, whatever its size.
constexpr uint64_t kChecksumChunkBytes = uint64_t{1} << 20;
// The identity fields of the header, in the order Write puts them.
constexpr const char* kIdentityFields[] = {
    "tailor_version", "compiler",    "arch",        "spec",
    "spec_hash",      "source_hash", "headers_hash"};

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe(absl::string_view p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::vector<std::string> IdentityValues(const EntryIdentity& id) {
  return {id.tailor_version,
          id.compiler,
          id.arch,
          id.spec,
          id.spec_hash.Hex(),
          id.source_hash.Hex(),
          id.headers_hash.Hex()};
}

// 32 lowercase hex digits (Hash128::Hex) back to the hash.
std::optional<Hash128> HashFromHex(absl::string_view hex) {
  Hash128 h;
  if (hex.size() != 32 ||
      !std::all_of(hex.begin(), hex.end(),
                   [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   }) ||
      !absl::SimpleHexAtoi(hex.substr(0, 16), &h.high) ||
      !absl::SimpleHexAtoi(hex.substr(16), &h.low)) {
    return std::nullopt;
  }
  return h;
}

// ---- where an entry's bytes come from ---------------------------------------

// An entry's bytes, read on demand: a file (lazily, with pread) or memory.
class EntryBytes {
 public:
  virtual ~EntryBytes() = default;
  virtual uint64_t size() const = 0;
  // The `n` bytes at `offset` into `out`; false when they cannot all be read.
  virtual bool ReadAt(uint64_t offset, uint64_t n, std::string& out) const = 0;
};

class MemoryBytes final : public EntryBytes {
 public:
  explicit MemoryBytes(absl::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  bool ReadAt(uint64_t offset, uint64_t n, std::string& out) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) return false;
    out.assign(bytes_.data() + offset, n);
    return true;
  }

 private:
  absl::string_view bytes_;
};

class FileBytes final : public EntryBytes {
 public:
  FileBytes(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ~FileBytes() override { close(fd_); }
  uint64_t size() const override { return size_; }
  bool ReadAt(uint64_t offset, uint64_t n, std::string& out) const override {
    out.resize(n);
    uint64_t done = 0;
    while (done < n) {
      ssize_t got = pread(fd_, out.data() + done, n - done,
                          static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += got;
    }
    return true;
  }

 private:
  int fd_;
  uint64_t size_;
};

absl::string_view FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

// Why a file with status `st` may not be read as an entry; empty if it may:
// only a regular file of ours, no larger than an entry can be.
std::string UnloadableBecause(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "entry is a symlink; not followed";
  if (!S_ISREG(st.st_mode)) {
    return absl::StrCat("entry is ", FileKind(st.st_mode),
                        ", not a regular file");
  }
  if (st.st_uid != geteuid()) {
    return absl::StrCat("entry is owned by uid ", st.st_uid,
                        ", not by this user (uid ", geteuid(), ")");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    return absl::StrCat("entry is ", st.st_size, " bytes, more than ",
                        kMaxEntryBytes, " (what an entry can be)");
  }
  return "";
}

struct OpenedEntry {
  EntryProblem problem = EntryProblem::kNone;
  std::string detail;
  std::unique_ptr<FileBytes> file;
};

// Opens the entry file at `path` for reading. A FIFO, device node, socket,
// directory or symlink in an entry's place is never opened in a way that can
// block: lstat rejects it first, and the open itself is O_NONBLOCK|O_NOFOLLOW
// (the file may be swapped between the two) and fstat checked again.
OpenedEntry OpenEntryFile(const std::string& path) {
  auto reject = [](EntryProblem problem, std::string detail) {
    return OpenedEntry{.problem = problem, .detail = std::move(detail)};
  };
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return reject(EntryProblem::kMissing, "");
    return reject(EntryProblem::kCorrupt,
                  absl::StrCat("lstat: ", std::strerror(errno)));
  }
  if (std::string why = UnloadableBecause(st); !why.empty())
    return reject(EntryProblem::kCorrupt, std::move(why));
  int fd = open(path.c_str(),
                O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return reject(EntryProblem::kMissing, "");
    if (errno == ELOOP)
      return reject(EntryProblem::kCorrupt, "entry is a symlink; not followed");
    return reject(EntryProblem::kCorrupt,
                  absl::StrCat("open: ", std::strerror(errno)));
  }
  std::string why = fstat(fd, &st) == 0
                        ? UnloadableBecause(st)
                        : absl::StrCat("fstat: ", std::strerror(errno));
  if (!why.empty()) {
    close(fd);
    return reject(EntryProblem::kCorrupt, std::move(why));
  }
  return OpenedEntry{.file = std::make_unique<FileBytes>(fd, st.st_size)};
}

// ---- the validator ----------------------------------------------------------

// What an entry must be: the identity the runtime expects, or (tools, which
// know none) the identity its own header states, for which `file_name` must
// be the entry's name.
struct Expectation {
  const EntryIdentity* identity = nullptr;
  absl::string_view file_name;
};

enum class PayloadUse { kSizeOnly, kChecksum, kLoad };

struct EntryCheck {
  EntryProblem problem = EntryProblem::kNone;
  std::string detail;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string payload;  // with PayloadUse::kLoad, when problem == kNone
  uint64_t payload_offset = 0;
  uint64_t payload_size = 0;

  EntryCheck& Fail(EntryProblem p, std::string why) {
    problem = p;
    detail = std::move(why);
    payload.clear();
    return *this;
  }
  const std::string* Field(absl::string_view name) const {
    for (const auto& [key, value] : fields) {
      if (key == name) return &value;
    }
    return nullptr;
  }
};

// Magic, version, header length and checksum; fills check.fields.
void CheckHead(const EntryBytes& bytes, EntryCheck& check) {
  std::string prefix, header, trailer;
  if (!bytes.ReadAt(0, kEntryPrefixBytes, prefix) ||
      absl::string_view(prefix).substr(0, 8) != kMagic) {
    check.Fail(EntryProblem::kCorrupt, "bad magic or truncated prefix");
    return;
  }
  const uint64_t version = GetLe(absl::string_view(prefix).substr(8), 4);
  if (version != kDiskFormatVersion) {
    check.Fail(EntryProblem::kStale,
               absl::StrCat("format version ", version, ", expected ",
                            kDiskFormatVersion));
    return;
  }
  const uint64_t header_len = GetLe(absl::string_view(prefix).substr(12), 4);
  if (header_len > kMaxEntryHeaderBytes) {
    check.Fail(EntryProblem::kCorrupt,
               absl::StrCat("header is ", header_len, " bytes, more than ",
                            kMaxEntryHeaderBytes));
    return;
  }
  if (!bytes.ReadAt(kEntryPrefixBytes, header_len, header) ||
      !bytes.ReadAt(kEntryPrefixBytes + header_len, 8, trailer)) {
    check.Fail(EntryProblem::kCorrupt, "truncated header");
    return;
  }
  if (GetLe(trailer, 8) != Checksum64(header)) {
    check.Fail(EntryProblem::kCorrupt, "header checksum mismatch");
    return;
  }
  absl::flat_hash_set<std::string> names;
  for (absl::string_view line :
       absl::StrSplit(header, '\n', absl::SkipEmpty())) {
    check.fields.push_back(absl::StrSplit(line, absl::MaxSplits('=', 1)));
    if (!names.insert(check.fields.back().first).second) {
      check.Fail(EntryProblem::kCorrupt,
                 absl::StrCat("header repeats ", check.fields.back().first));
      return;
    }
  }
  check.payload_offset = kEntryPrefixBytes + header_len + 8;
  check.payload_size = bytes.size() - check.payload_offset;
}

// The identity the header states; nullopt (and check failed) when a field is
// missing or not a hash.
std::optional<EntryIdentity> StatedIdentity(EntryCheck& check) {
  const std::string* values[std::size(kIdentityFields)];
  for (size_t i = 0; i < std::size(kIdentityFields); ++i) {
    values[i] = check.Field(kIdentityFields[i]);
    if (values[i] == nullptr) {
      check.Fail(EntryProblem::kCorrupt,
                 absl::StrCat("no ", kIdentityFields[i]));
      return std::nullopt;
    }
  }
  EntryIdentity id{.tailor_version = *values[0],
                   .compiler = *values[1],
                   .arch = *values[2],
                   .spec = *values[3]};
  Hash128* hashes[] = {&id.spec_hash, &id.source_hash, &id.headers_hash};
  for (int i = 0; i < 3; ++i) {
    std::optional<Hash128> h = HashFromHex(*values[4 + i]);
    if (!h) {
      check.Fail(EntryProblem::kCorrupt,
                 absl::StrCat(kIdentityFields[4 + i], " is not a hash"));
      return std::nullopt;
    }
    *hashes[i] = *h;
  }
  return id;
}

// The header's identity against what is expected (see Expectation).
void CheckIdentity(const Expectation& expected, EntryCheck& check) {
  if (expected.identity == nullptr) {
    std::optional<EntryIdentity> stated = StatedIdentity(check);
    if (!stated) return;
    std::string name = EntryFileName(EntryFileStem(stated->spec), *stated);
    if (name != expected.file_name) {
      check.Fail(EntryProblem::kStale,
                 absl::StrCat("its header is the entry ", name,
                              ", not this file's name (copied or renamed?)"));
    }
    return;
  }
  std::vector<std::string> values = IdentityValues(*expected.identity);
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string* value = check.Field(kIdentityFields[i]);
    if (value == nullptr) {
      check.Fail(EntryProblem::kCorrupt,
                 absl::StrCat("no ", kIdentityFields[i]));
      return;
    }
    if (*value != values[i]) {
      check.Fail(EntryProblem::kStale,
                 absl::StrCat(kIdentityFields[i], " is \"", *value,
                              "\", expected \"", values[i], "\""));
      return;
    }
  }
}

// The payload's size (always) and checksum (unless kSizeOnly).
void CheckPayload(const EntryBytes& bytes, PayloadUse use, EntryCheck& check) {
  const std::string* size_text = check.Field("payload_size");
  uint64_t size = 0, checksum = 0;
  if (size_text == nullptr || !absl::SimpleAtoi(*size_text, &size) ||
      size != check.payload_size) {
    check.Fail(
        EntryProblem::kCorrupt,
        absl::StrCat("payload is ", check.payload_size, " bytes, header says ",
                     size_text ? *size_text : "nothing", " (truncated?)"));
    return;
  }
  if (use == PayloadUse::kSizeOnly) return;
  const std::string* sum_text = check.Field("payload_xxh3");
  bool read = true;
  uint64_t actual = 0;
  if (use == PayloadUse::kLoad) {
    read = bytes.ReadAt(check.payload_offset, size, check.payload);
    actual = Checksum64(check.payload);
  } else {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(
        XXH3_createState(), &XXH3_freeState);
    XXH3_64bits_reset(state.get());
    std::string chunk;
    for (uint64_t at = 0; read && at < size; at += kChecksumChunkBytes) {
      read = bytes.ReadAt(check.payload_offset + at,
                          std::min(kChecksumChunkBytes, size - at), chunk);
      XXH3_64bits_update(state.get(), chunk.data(), chunk.size());
    }
    actual = XXH3_64bits_digest(state.get());
  }
  if (!read) {
    check.Fail(EntryProblem::kCorrupt, "payload cannot be read (truncated?)");
  } else if (sum_text == nullptr || !absl::SimpleAtoi(*sum_text, &checksum) ||
             checksum != actual) {
    check.Fail(EntryProblem::kCorrupt, "payload checksum mismatch");
  }
}

EntryCheck CheckEntry(const EntryBytes& bytes, const Expectation& expected,
                      PayloadUse use) {
  EntryCheck check;
  CheckHead(bytes, check);
  if (check.problem == EntryProblem::kNone) CheckIdentity(expected, check);
  if (check.problem == EntryProblem::kNone) CheckPayload(bytes, use, check);
  return check;
}

EntryInspection ToInspection(EntryCheck check) {
  EntryInspection result{.problem = check.problem,
                         .detail = std::move(check.detail)};
  if (check.problem == EntryProblem::kNone)
    result.fields = std::move(check.fields);
  return result;
}

ReadResult ToReadResult(EntryCheck check) {
  return ReadResult{.problem = check.problem,
                    .detail = std::move(check.detail),
                    .payload = std::move(check.payload)};
}

absl::string_view BaseName(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string EntryHead(const EntryIdentity& id, absl::string_view payload) {
  std::string header;
  std::vector<std::string> values = IdentityValues(id);
  for (size_t i = 0; i < values.size(); ++i)
    absl::StrAppend(&header, kIdentityFields[i], "=", values[i], "\n");
  absl::StrAppend(&header, "payload_size=", payload.size(),
                  "\npayload_xxh3=", Checksum64(payload), "\n");
  std::string head(kMagic);
  PutLe(head, kDiskFormatVersion, 4);
  PutLe(head, header.size(), 4);
  head += header;
  PutLe(head, Checksum64(header), 8);
  return head;
}

std::string EntryFileStem(absl::string_view spec) {
  std::string stem(spec.substr(0, 120));
  for (char& c : stem) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!safe) c = '_';
  }
  return stem;
}

std::string EntryFileName(absl::string_view stem, const EntryIdentity& id) {
  return absl::StrCat(stem, "-", id.Hash().Hex(), ".tkc");
}

ReadResult DiskCache::Read(absl::string_view stem,
                           const EntryIdentity& id) const {
  OpenedEntry opened = OpenEntryFile(EntryPath(stem, id));
  if (opened.problem != EntryProblem::kNone)
    return ReadResult{.problem = opened.problem,
                      .detail = std::move(opened.detail)};
  return ToReadResult(
      CheckEntry(*opened.file, {.identity = &id}, PayloadUse::kLoad));
}

ReadResult ParseEntry(absl::string_view bytes, const EntryIdentity& id) {
  return ToReadResult(
      CheckEntry(MemoryBytes(bytes), {.identity = &id}, PayloadUse::kLoad));
}

std::string EntryInspection::Field(absl::string_view name) const {
  for (const auto& [key, value] : fields) {
    if (key == name) return value;
  }
  return "";
}

EntryInspection InspectEntryFile(const std::string& path, bool verify_payload) {
  OpenedEntry opened = OpenEntryFile(path);
  if (opened.problem != EntryProblem::kNone) {
    return EntryInspection{.problem = opened.problem,
                           .detail = std::move(opened.detail)};
  }
  return ToInspection(CheckEntry(
      *opened.file, {.file_name = BaseName(path)},
      verify_payload ? PayloadUse::kChecksum : PayloadUse::kSizeOnly));
}

EntryInspection InspectEntryBytes(absl::string_view bytes,
                                  absl::string_view file_name,
                                  bool verify_payload) {
  return ToInspection(CheckEntry(
      MemoryBytes(bytes), {.file_name = file_name},
      verify_payload ? PayloadUse::kChecksum : PayloadUse::kSizeOnly));
}

}  // namespace tailor::internal
