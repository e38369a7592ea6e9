// core/disk_eviction.h — a size limit for the disk cache: the least recently
// used entries go first (ccache-style: approximate, and safe with any number
// of processes sharing the directory).
//
// Recency is an entry's mtime. Writing an entry sets it; the kernel cache
// refreshes it (TouchEntryFile) whenever a process loads the entry from disk,
// and every kHitsPerTouch memory hits of a kernel, so that the kernels a
// long-running server keeps using stay young on disk.
//
// The directory's size is tracked in the counter file "<dir>/size-counter"
// (decimal bytes), which every writer updates under flock(); a counter that is
// not a regular file is removed and rebuilt by a scan. A writer whose
// addition takes the counter past the limit evicts under the same lock: it
// scans the directory, removes the oldest entries until at most
// kEvictionTargetFraction of the limit remains, and stores the true total. A
// missing or unreadable counter is rebuilt by a scan. Concurrent readers are
// safe: a file unlinked while open stays readable, and one unlinked before it
// is opened is a miss (recompiled), never an error.
//
// Only regular "*.tkc" files count as entries; the temp files of writers in
// flight and symlinks are neither counted nor removed here.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(uint64_t limit, ParseByteSize("512M"));
//   TAILOR_ASSIGN_OR_RETURN(EvictionReport report,
//                           NoteEntryWritten(dir, entry_bytes, limit));
//   // report.removed_entries entries were evicted to make room
#ifndef TAILOR_CORE_DISK_EVICTION_H_
#define TAILOR_CORE_DISK_EVICTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tailor::internal {

// Eviction stops once the entries fit in this fraction of the limit, so that
// a full cache is not scanned again on the very next write.
inline constexpr double kEvictionTargetFraction = 0.9;
// The limit when neither Runtime::Options nor $TAILOR_CACHE_MAX_SIZE sets one.
inline constexpr uint64_t kDefaultDiskCacheMaxBytes = uint64_t{2} << 30;
// A kernel kept in memory refreshes its disk entry's mtime every this many
// memory hits (a power of two).
inline constexpr uint32_t kHitsPerTouch = 1u << 16;
inline constexpr char kSizeCounterFile[] = "size-counter";

struct EntryFile {
  std::string name;          // file name inside the directory
  uint64_t bytes = 0;        // st_size
  int64_t last_used_ns = 0;  // mtime, nanoseconds since the epoch
};

// Every entry file of `dir`, in no particular order. Internal naming `dir`
// when it cannot be read.
absl::StatusOr<std::vector<EntryFile>> ListEntryFiles(const std::string& dir);

struct EvictionReport {
  uint64_t removed_entries = 0;
  uint64_t removed_bytes = 0;
  uint64_t kept_entries = 0;
  uint64_t kept_bytes = 0;
};

// Removes the least recently used entries of `dir` until at most
// `target_bytes` remain (0 removes every entry) and sets the size counter to
// what remains. Holds the counter's lock throughout.
absl::StatusOr<EvictionReport> EvictToSize(const std::string& dir,
                                           uint64_t target_bytes);

// Adds `bytes` (an entry just written) to the size counter of `dir`. When the
// counter passes `max_bytes`, evicts down to kEvictionTargetFraction of it.
// Returns what was evicted (usually nothing).
absl::StatusOr<EvictionReport> NoteEntryWritten(const std::string& dir,
                                                uint64_t bytes,
                                                uint64_t max_bytes);

// The names of `dir` that end in ".tkc" but are not regular files
// (directories, symlinks, FIFOs, ...): never entries, and in an entry's place
// they keep it from being written; tailor-cache verify and clear remove them.
absl::StatusOr<std::vector<std::string>> ListNonRegularEntryNames(
    const std::string& dir);

// The size counter of `dir` as it stands (after a scan if it was missing).
absl::StatusOr<uint64_t> ReadSizeCounter(const std::string& dir);

// Sets the mtime of the entry at `path` to now: it was just used. Failures
// are ignored (recency is a hint; a vanished entry is simply a future miss).
void TouchEntryFile(const std::string& path);

// Parses a size in bytes: digits, optionally followed by a binary unit K, M,
// G or T (any case, optionally with "iB" or "B": "512M", "2GiB", "64k").
// InvalidArgument quoting `text` otherwise, or when it overflows 64 bits.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// "512 B", "20.0 KiB", "1.50 GiB".
std::string FormatByteSize(uint64_t bytes);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_DISK_EVICTION_H_
