#include "core/disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tailor::internal {
namespace {

absl::Mutex fault_hook_mu(absl::kConstInit);
WriteFaultHook* fault_hook ABSL_GUARDED_BY(fault_hook_mu) = nullptr;

// The errno the test hook injects into `step`, 0 (no fault) without a hook.
int InjectedFault(WriteStep step) {
  absl::MutexLock lock(&fault_hook_mu);
  return fault_hook == nullptr ? 0 : (*fault_hook)(step);
}

// write(), or the half-done write of a full disk when a fault is injected.
ssize_t WriteSome(int fd, const char* data, size_t size) {
  if (int err = InjectedFault(WriteStep::kWrite); err != 0) {
    if (size > 1 && write(fd, data, size / 2) < 0) return -1;
    errno = err;
    return -1;
  }
  return write(fd, data, size);
}

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) {
  int err = errno;
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS)
    return absl::PermissionDeniedError(message);
  if (err == ENOSPC || err == EDQUOT)
    return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus("cannot create cache directory", prefix);
    }
  }
  return absl::OkStatus();
}

}  // namespace

Hash128 EntryIdentity::Hash() const {
  return Hasher()
      .Add(uint64_t{kDiskFormatVersion})
      .Add(tailor_version)
      .Add(compiler)
      .Add(arch)
      .Add(spec)
      .Add(spec_hash)
      .Add(source_hash)
      .Add(headers_hash)
      .Finish();
}

std::string DefaultCacheDir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  if (std::string dir = env("TAILOR_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty())
    return xdg + "/tailor";
  if (std::string home = env("HOME"); !home.empty())
    return home + "/.cache/tailor";
  return "";
}

namespace {

// Removes "<entry>.tkc.tmp.<pid>.<n>" files older than kStaleTempSeconds: what
// writers killed between create and rename left behind.
void RemoveStaleTempFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  const time_t now = time(nullptr);
  while (const dirent* e = readdir(d)) {
    if (std::strstr(e->d_name, ".tkc.tmp.") == nullptr) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISREG(st.st_mode) && now - st.st_mtime > kStaleTempSeconds) {
      unlinkat(dirfd(d), e->d_name, 0);
    }
  }
  closedir(d);
}

}  // namespace

absl::StatusOr<DiskCache> DiskCache::Open(std::string dir) {
  return OpenChecked(std::move(dir), /*create=*/true);
}

absl::StatusOr<DiskCache> DiskCache::OpenExisting(std::string dir) {
  return OpenChecked(std::move(dir), /*create=*/false);
}

absl::StatusOr<DiskCache> DiskCache::OpenChecked(std::string dir, bool create) {
  if (dir.empty()) {
    return absl::FailedPreconditionError(
        "cache_dir: no directory (set TAILOR_CACHE_DIR, XDG_CACHE_HOME or "
        "HOME)");
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (create) {
    if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT && !create) {
      return absl::NotFoundError(
          absl::StrCat("cache_dir ", dir, " does not exist"));
    }
    return ErrnoStatus("cannot stat cache directory", dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cache_dir ", dir, " is not a directory"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cache_dir ", dir, " is owned by uid ", st.st_uid,
                     ", not by this user (uid ", geteuid(),
                     "); refusing to load kernels from it"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cache_dir %s has mode %03o: group/world-writable "
                        "directories are refused "
                        "(chmod 700 it)",
                        dir, st.st_mode & 0777));
  }
  RemoveStaleTempFiles(dir);
  return DiskCache(std::move(dir));
}

std::string DiskCache::EntryPath(absl::string_view stem,
                                 const EntryIdentity& id) const {
  return absl::StrCat(dir_, "/", EntryFileName(stem, id));
}

namespace {

// Writes all of `bytes` to `fd`; false (errno set) when a write fails.
bool WriteAll(int fd, absl::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = WriteSome(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += n;
  }
  return true;
}

// rename(tmp, path); a non-regular file at `path` that rename() cannot
// replace (a directory) is removed first and the rename tried again.
absl::Status RenameIntoPlace(const std::string& tmp, const std::string& path) {
  if (int fault = InjectedFault(WriteStep::kRename); fault != 0) {
    errno = fault;
    return ErrnoStatus("cannot rename cache entry into", path);
  }
  if (rename(tmp.c_str(), path.c_str()) == 0) return absl::OkStatus();
  if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST) {
    absl::Status removed = RemoveNonRegularFile(path);
    if (!removed.ok()) return removed;
    if (rename(tmp.c_str(), path.c_str()) == 0) return absl::OkStatus();
  }
  return ErrnoStatus("cannot rename cache entry into", path);
}

}  // namespace

absl::Status DiskCache::Write(absl::string_view stem, const EntryIdentity& id,
                              absl::string_view payload) const {
  if (payload.size() > kMaxEntryPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload: ", payload.size(), " bytes, more than the ",
                     kMaxEntryPayloadBytes, " a cache entry can hold"));
  }
  const std::string head = EntryHead(id, payload);
  const std::string path = EntryPath(stem, id);
  const std::string tmp =
      absl::StrCat(path, ".tmp.", getpid(), ".", std::random_device{}());
  int fd = -1;
  if (int err = InjectedFault(WriteStep::kCreate); err != 0) {
    errno = err;
  } else {
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
  }
  if (fd < 0) return ErrnoStatus("cannot create cache entry", tmp);
  absl::Status status = WriteAll(fd, head) && WriteAll(fd, payload)
                            ? absl::OkStatus()
                            : ErrnoStatus("cannot write cache entry", tmp);
  int close_error = close(fd) != 0 ? errno : InjectedFault(WriteStep::kClose);
  if (close_error != 0 && status.ok()) {
    errno = close_error;
    status = ErrnoStatus("cannot close cache entry", tmp);
  }
  if (status.ok()) status = RenameIntoPlace(tmp, path);
  if (!status.ok()) unlink(tmp.c_str());
  return status;
}

namespace {

int RemoveOne(const char* path, const struct stat*, int type, struct FTW*) {
  return (type == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : errno;
}

}  // namespace

absl::Status RemoveNonRegularFile(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus("cannot stat", path);
  }
  if (S_ISREG(st.st_mode)) return absl::OkStatus();
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      return ErrnoStatus("cannot remove", path);
    return absl::OkStatus();
  }
  // Depth first, links not followed, never into another filesystem.
  int err = nftw(path.c_str(), RemoveOne, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (err != 0) {
    errno = err > 0 ? err : errno;
    return ErrnoStatus("cannot remove the directory", path);
  }
  return absl::OkStatus();
}

void SetWriteFaultHookForTesting(WriteFaultHook hook) {
  WriteFaultHook* next = hook ? new WriteFaultHook(std::move(hook)) : nullptr;
  WriteFaultHook* previous;
  {
    absl::MutexLock lock(&fault_hook_mu);
    previous = fault_hook;
    fault_hook = next;
  }
  delete previous;
}

}  // namespace tailor::internal
