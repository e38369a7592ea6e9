#include "core/disk_eviction.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/disk_cache.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// The size counter file, open and locked (flock, exclusive) for its lifetime.
class LockedCounter {
 public:
  // A counter that is not a regular file (a directory, symlink or FIFO in
  // its place) is removed and recreated: left there, it would turn the size
  // limit off for good.
  static absl::StatusOr<LockedCounter> Open(const std::string& dir) {
    std::string path = absl::StrCat(dir, "/", kSizeCounterFile);
    TAILOR_RETURN_IF_ERROR(RemoveNonRegularFile(path));
    int fd = open(path.c_str(),
                  O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError("cannot open size counter", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("size counter ", path, " is not a regular file"));
    }
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      absl::Status status = ErrnoError("cannot lock size counter", path);
      close(fd);
      return status;
    }
    return LockedCounter(fd);
  }
  LockedCounter(LockedCounter&& other) noexcept : fd_(other.fd_) {
    other.fd_ = -1;
  }
  LockedCounter& operator=(LockedCounter&&) = delete;
  ~LockedCounter() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }

  // The stored value; nullopt when the file is empty or not a number.
  std::optional<uint64_t> Read() const {
    char buffer[32];
    ssize_t n = pread(fd_, buffer, sizeof(buffer) - 1, 0);
    if (n <= 0) return std::nullopt;
    uint64_t value = 0;
    if (!absl::SimpleAtoi(absl::string_view(buffer, n), &value))
      return std::nullopt;
    return value;
  }
  void Write(uint64_t value) const {
    std::string text = absl::StrCat(value, "\n");
    if (pwrite(fd_, text.data(), text.size(), 0) ==
        static_cast<ssize_t>(text.size())) {
      (void)ftruncate(fd_, static_cast<off_t>(text.size()));
    }
  }

 private:
  explicit LockedCounter(int fd) : fd_(fd) {}
  int fd_;
};

uint64_t TotalBytes(const std::vector<EntryFile>& entries) {
  uint64_t total = 0;
  for (const EntryFile& e : entries) total += e.bytes;
  return total;
}

// EvictToSize's work, with the counter already locked.
absl::StatusOr<EvictionReport> EvictLocked(const std::string& dir,
                                           uint64_t target_bytes,
                                           const LockedCounter& counter) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries, ListEntryFiles(dir));
  std::sort(entries.begin(), entries.end(),
            [](const EntryFile& a, const EntryFile& b) {
              if (a.last_used_ns != b.last_used_ns)
                return a.last_used_ns < b.last_used_ns;
              return a.name < b.name;
            });
  EvictionReport report;
  report.kept_entries = entries.size();
  report.kept_bytes = TotalBytes(entries);
  for (const EntryFile& e : entries) {
    if (report.kept_bytes <= target_bytes) break;
    std::string path = absl::StrCat(dir, "/", e.name);
    // ENOENT: another process evicted it first; either way it is gone.
    if (unlink(path.c_str()) == 0) {
      ++report.removed_entries;
      report.removed_bytes += e.bytes;
    }
    --report.kept_entries;
    report.kept_bytes -= e.bytes;
  }
  counter.Write(report.kept_bytes);
  return report;
}

}  // namespace

absl::StatusOr<std::vector<EntryFile>> ListEntryFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("cannot read cache directory", dir);
  std::vector<EntryFile> entries;
  while (const dirent* e = readdir(d)) {
    absl::string_view name(e->d_name);
    if (!absl::EndsWith(name, ".tkc")) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode)) continue;
    entries.push_back(EntryFile{
        .name = std::string(name),
        .bytes = static_cast<uint64_t>(st.st_size),
        .last_used_ns =
            int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
  }
  closedir(d);
  return entries;
}

absl::StatusOr<std::vector<std::string>> ListNonRegularEntryNames(
    const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("cannot read cache directory", dir);
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    absl::string_view name(e->d_name);
    if (!absl::EndsWith(name, ".tkc")) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode)) names.emplace_back(name);
  }
  closedir(d);
  return names;
}

absl::StatusOr<EvictionReport> EvictToSize(const std::string& dir,
                                           uint64_t target_bytes) {
  TAILOR_ASSIGN_OR_RETURN(LockedCounter counter, LockedCounter::Open(dir));
  return EvictLocked(dir, target_bytes, counter);
}

absl::StatusOr<EvictionReport> NoteEntryWritten(const std::string& dir,
                                                uint64_t bytes,
                                                uint64_t max_bytes) {
  TAILOR_ASSIGN_OR_RETURN(LockedCounter counter, LockedCounter::Open(dir));
  std::optional<uint64_t> stored = counter.Read();
  uint64_t total = 0;
  if (stored.has_value()) {
    total = *stored + bytes;
  } else {
    // First write into this directory, or a damaged counter: count afresh
    // (the new entry is already in place, so it is counted by the scan).
    TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries,
                            ListEntryFiles(dir));
    total = TotalBytes(entries);
  }
  if (total <= max_bytes) {
    counter.Write(total);
    return EvictionReport{};
  }
  const uint64_t target = static_cast<uint64_t>(static_cast<double>(max_bytes) *
                                                kEvictionTargetFraction);
  return EvictLocked(dir, target, counter);
}

absl::StatusOr<uint64_t> ReadSizeCounter(const std::string& dir) {
  TAILOR_ASSIGN_OR_RETURN(LockedCounter counter, LockedCounter::Open(dir));
  if (std::optional<uint64_t> stored = counter.Read()) return *stored;
  TAILOR_ASSIGN_OR_RETURN(std::vector<EntryFile> entries, ListEntryFiles(dir));
  uint64_t total = TotalBytes(entries);
  counter.Write(total);
  return total;
}

void TouchEntryFile(const std::string& path) {
  (void)utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(rest[digits])) ++digits;
  uint64_t value = 0;
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text,
        "\" is not a size (bytes, or a number with K, M, G or T, e.g. 512M)"));
  };
  if (digits == 0 || !absl::SimpleAtoi(rest.substr(0, digits), &value))
    return invalid();
  std::string unit = absl::AsciiStrToLower(rest.substr(digits));
  int shift = 0;
  if (!unit.empty()) {
    const char* const kUnits = "kmgt";
    const char* found = std::strchr(kUnits, unit[0]);
    if (found == nullptr) return invalid();
    shift = 10 * static_cast<int>(found - kUnits + 1);
    absl::string_view suffix = absl::string_view(unit).substr(1);
    if (suffix != "" && suffix != "b" && suffix != "ib") return invalid();
  }
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift))
    return invalid();
  return value << shift;
}

std::string FormatByteSize(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  // Two literal formats: absl checks a format string at compile time under
  // Clang, which rejects a format chosen at run time.
  if (value < 10) return absl::StrFormat("%.2f %s", value, kUnits[unit]);
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace tailor::internal
