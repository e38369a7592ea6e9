// tailor-cache — look after tailor's disk cache of compiled kernels.
//
//   tailor-cache stats                 entries, size, limit, by op and arch
//   tailor-cache list                  one line per entry, most recent first
//   tailor-cache verify                check every entry as the runtime
//                                      does; remove bad ones
//   tailor-cache prune [--max-size S]  evict least recently used entries
//   tailor-cache clear                 remove every entry
//
// Every command takes --cache-dir DIR (default: $TAILOR_CACHE_DIR, else
// $XDG_CACHE_HOME/tailor, else ~/.cache/tailor), which must exist, and
// refuses a directory that the runtime would refuse (not ours,
// group/world-writable). Safe to run
// while servers use the cache: removal is unlink(), which a reader holding
// the file open does not notice, and which a later reader sees as a miss.
//
// Exit status: 0 done; 1 verify found (and removed) bad entries, or the
// command failed; 2 bad usage.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/disk_cache.h"
#include "core/disk_eviction.h"
#include "tailor/status.h"

namespace {

using tailor::internal::EntryFile;
using tailor::internal::EntryInspection;
using tailor::internal::EntryProblem;
using tailor::internal::FormatByteSize;

constexpr char kUsage[] = R"(usage: tailor-cache [--cache-dir DIR] COMMAND

Looks after tailor's disk cache of compiled kernels.

commands:
  stats                entries, total size, size limit, entries per op/arch
  list                 one line per entry (size, last use, key), most
                       recently used first
  verify               check every entry as the runtime does (checksums,
                       format, named for the kernel its header states, a
                       regular file of ours); remove and report the bad
                       ones (exit 1 when there were any); writes nothing
                       when all are good
  prune [--max-size S] evict least recently used entries until the cache
                       fits S (default: $TAILOR_CACHE_MAX_SIZE, else 2G);
                       S is bytes or a number with K, M, G or T
  clear                remove every entry (and whatever non-regular file
                       has an entry's name)
options:
  --cache-dir DIR      the cache (default: $TAILOR_CACHE_DIR, else
                       $XDG_CACHE_HOME/tailor, else ~/.cache/tailor)
  --help               this text
)";

struct Flags {
  std::string command;
  std::string cache_dir;
  std::optional<uint64_t> max_size;
};

absl::Status ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--cache-dir" || arg == "--max-size") {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(arg + ": needs a value");
      std::string value = argv[++i];
      if (arg == "--cache-dir") {
        f.cache_dir = value;
      } else {
        absl::StatusOr<uint64_t> size = tailor::internal::ParseByteSize(value);
        if (!size.ok())
          return absl::InvalidArgumentError(
              absl::StrCat("--max-size: ", size.status().message()));
        f.max_size = *size;
      }
    } else if (!arg.empty() && arg[0] == '-') {
      return absl::InvalidArgumentError("unknown flag " + arg);
    } else if (f.command.empty()) {
      f.command = arg;
    } else {
      return absl::InvalidArgumentError("unexpected argument " + arg);
    }
  }
  if (f.command.empty()) return absl::InvalidArgumentError("give a command");
  static const char* const kCommands[] = {"stats", "list", "verify", "prune",
                                          "clear"};
  if (std::find(std::begin(kCommands), std::end(kCommands), f.command) ==
      std::end(kCommands))
    return absl::InvalidArgumentError("unknown command " + f.command);
  if (f.max_size.has_value() && f.command != "prune")
    return absl::InvalidArgumentError("--max-size: only for prune");
  return absl::OkStatus();
}

// The limit prune applies without --max-size, as the runtime would: 0 means
// no limit.
uint64_t ConfiguredLimit(std::string* origin) {
  const char* env = std::getenv("TAILOR_CACHE_MAX_SIZE");
  if (env != nullptr && *env != '\0') {
    absl::StatusOr<uint64_t> parsed = tailor::internal::ParseByteSize(env);
    if (parsed.ok()) {
      *origin = "$TAILOR_CACHE_MAX_SIZE";
      return *parsed;
    }
    *origin = absl::StrCat("default; $TAILOR_CACHE_MAX_SIZE is invalid: ",
                           parsed.status().message());
    return tailor::internal::kDefaultDiskCacheMaxBytes;
  }
  *origin = "default";
  return tailor::internal::kDefaultDiskCacheMaxBytes;
}

std::string FormatTime(int64_t ns) {
  time_t seconds = static_cast<time_t>(ns / 1000000000);
  struct tm local;
  localtime_r(&seconds, &local);
  char text[32];
  strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

// Most recently used first.
absl::StatusOr<std::vector<EntryFile>> SortedEntries(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries,
                          tailor::internal::ListEntryFiles(dir));
  std::sort(entries.begin(), entries.end(),
            [](const EntryFile& a, const EntryFile& b) {
              if (a.last_used_ns != b.last_used_ns)
                return a.last_used_ns > b.last_used_ns;
              return a.name < b.name;
            });
  return entries;
}

absl::Status Stats(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries, SortedEntries(dir));
  uint64_t total = 0;
  std::map<std::string, std::pair<int, uint64_t>> by_op, by_target;
  for (const EntryFile& e : entries) {
    total += e.bytes;
    EntryInspection info = tailor::internal::InspectEntryFile(
        absl::StrCat(dir, "/", e.name), /*verify_payload=*/false);
    std::string spec = info.Field("spec");
    std::string op =
        spec.empty() ? "(unreadable)" : spec.substr(0, spec.find('/'));
    std::string target =
        spec.empty() ? "(unreadable)"
                     : absl::StrCat("tailor ", info.Field("tailor_version"),
                                    ", ", info.Field("arch"));
    for (auto* group : {&by_op[op], &by_target[target]}) {
      ++group->first;
      group->second += e.bytes;
    }
  }
  std::string origin;
  uint64_t limit = ConfiguredLimit(&origin);
  std::printf("cache directory  %s\n", dir.c_str());
  std::printf("entries          %zu, %s\n", entries.size(),
              FormatByteSize(total).c_str());
  std::printf("size limit       %s (%s)\n",
              limit == 0 ? "none" : FormatByteSize(limit).c_str(),
              origin.c_str());
  if (!entries.empty()) {
    std::printf("last used        %s (oldest %s)\n",
                FormatTime(entries.front().last_used_ns).c_str(),
                FormatTime(entries.back().last_used_ns).c_str());
  }
  for (const auto& [title, groups] :
       {std::pair{"by op", &by_op}, std::pair{"by build", &by_target}}) {
    std::printf("%s:\n", title);
    for (const auto& [name, group] : *groups) {
      std::printf("  %-40s %5d  %s\n", name.c_str(), group.first,
                  FormatByteSize(group.second).c_str());
    }
  }
  return absl::OkStatus();
}

absl::Status List(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries, SortedEntries(dir));
  std::printf("%10s  %-19s  %s\n", "size", "last used", "key");
  for (const EntryFile& e : entries) {
    EntryInspection info = tailor::internal::InspectEntryFile(
        absl::StrCat(dir, "/", e.name), /*verify_payload=*/false);
    std::string key = info.problem == EntryProblem::kNone
                          ? info.Field("spec")
                          : absl::StrCat("(", e.name, ": ", info.detail, ")");
    std::printf("%10s  %-19s  %s\n", FormatByteSize(e.bytes).c_str(),
                FormatTime(e.last_used_ns).c_str(), key.c_str());
  }
  std::printf("%zu entries\n", entries.size());
  return absl::OkStatus();
}

// Removes the entry file or non-regular file at `path`.
bool RemoveEntryName(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    return unlink(path.c_str()) == 0;
  return tailor::internal::RemoveNonRegularFile(path).ok();
}

// Every "*.tkc" name in `dir`: the entries, most recently used first, then
// what is not a regular file (never an entry, and it blocks one's name).
absl::StatusOr<std::vector<std::string>> AllEntryNames(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries, SortedEntries(dir));
  TAILOR_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          tailor::internal::ListNonRegularEntryNames(dir));
  std::vector<std::string> all;
  for (const EntryFile& e : entries) all.push_back(e.name);
  all.insert(all.end(), names.begin(), names.end());
  return all;
}

// Checks every entry as the runtime would (InspectEntryFile, the runtime's
// validator) and removes the bad ones. Returns how many were bad. Writes
// nothing when all are good, so that a read-only cache can be verified.
absl::StatusOr<int> Verify(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<std::string> names, AllEntryNames(dir));
  int bad = 0, kept = 0;
  for (const std::string& name : names) {
    std::string path = absl::StrCat(dir, "/", name);
    EntryInspection info =
        tailor::internal::InspectEntryFile(path, /*verify_payload=*/true);
    if (info.problem == EntryProblem::kNone ||
        info.problem == EntryProblem::kMissing) {  // evicted meanwhile
      continue;
    }
    ++bad;
    bool removed = RemoveEntryName(path);
    if (!removed) ++kept;
    std::printf("%s  %s: %s\n", removed ? "removed" : "CANNOT REMOVE",
                name.c_str(), info.detail.c_str());
  }
  // Recount (nothing is evicted at this target) so the size counter
  // forgets what was removed.
  if (bad > kept) {
    TAILOR_RETURN_IF_ERROR(
        tailor::internal::EvictToSize(dir, ~uint64_t{0}).status());
  }
  std::printf("verified %zu entries: %zu good, %d bad (%s)\n", names.size(),
              names.size() - bad, bad,
              kept == 0 ? "removed"
                        : absl::StrCat(kept, " could not be removed").c_str());
  return bad;
}

absl::Status Prune(const std::string& dir, std::optional<uint64_t> max_size) {
  std::string origin = "--max-size";
  uint64_t limit = max_size.has_value() ? *max_size : ConfiguredLimit(&origin);
  if (limit == 0 && !max_size.has_value()) {
    std::printf("no size limit (%s is 0): nothing to prune\n", origin.c_str());
    return absl::OkStatus();
  }
  TAILOR_ASSIGN_OR_RETURN(tailor::internal::EvictionReport report,
                          tailor::internal::EvictToSize(dir, limit));
  std::printf("pruned to %s (%s): removed %llu entries (%s), kept %llu (%s)\n",
              FormatByteSize(limit).c_str(), origin.c_str(),
              static_cast<unsigned long long>(report.removed_entries),
              FormatByteSize(report.removed_bytes).c_str(),
              static_cast<unsigned long long>(report.kept_entries),
              FormatByteSize(report.kept_bytes).c_str());
  return absl::OkStatus();
}

absl::Status Clear(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<std::string> odd,
                          tailor::internal::ListNonRegularEntryNames(dir));
  for (const std::string& name : odd) {
    TAILOR_RETURN_IF_ERROR(
        tailor::internal::RemoveNonRegularFile(absl::StrCat(dir, "/", name)));
  }
  TAILOR_ASSIGN_OR_RETURN(tailor::internal::EvictionReport report,
                          tailor::internal::EvictToSize(dir, 0));
  std::printf("removed %llu entries (%s)",
              static_cast<unsigned long long>(report.removed_entries),
              FormatByteSize(report.removed_bytes).c_str());
  if (!odd.empty()) std::printf(" and %zu non-regular files", odd.size());
  std::printf("\n");
  return absl::OkStatus();
}

// Runs the command; the exit status.
absl::StatusOr<int> Run(const Flags& flags, const std::string& dir) {
  if (flags.command == "stats") TAILOR_RETURN_IF_ERROR(Stats(dir));
  if (flags.command == "list") TAILOR_RETURN_IF_ERROR(List(dir));
  if (flags.command == "prune")
    TAILOR_RETURN_IF_ERROR(Prune(dir, flags.max_size));
  if (flags.command == "clear") TAILOR_RETURN_IF_ERROR(Clear(dir));
  if (flags.command == "verify") {
    TAILOR_ASSIGN_OR_RETURN(int bad, Verify(dir));
    return bad > 0 ? 1 : 0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  Flags flags;
  if (absl::Status s = ParseFlags(argc, argv, flags); !s.ok()) {
    std::fprintf(stderr,
                 "tailor-cache: %s\n(tailor-cache --help prints the usage)\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  std::string dir = flags.cache_dir.empty()
                        ? tailor::internal::DefaultCacheDir()
                        : flags.cache_dir;
  // The runtime's own checks (ownership, permissions), on a directory that
  // must exist (a mistyped --cache-dir is not created); also sweeps the temp
  // files of writers killed long ago.
  absl::StatusOr<tailor::internal::DiskCache> cache =
      tailor::internal::DiskCache::OpenExisting(dir);
  if (!cache.ok()) {
    std::fprintf(stderr, "tailor-cache: %s\n",
                 std::string(cache.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<int> code = Run(flags, cache->dir());
  if (!code.ok()) {
    std::fprintf(stderr, "tailor-cache: %s\n",
                 std::string(code.status().message()).c_str());
    return 1;
  }
  return *code;
}
