#include "core/disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tailor::internal {
namespace {

constexpr absl::string_view kMagic = "TAILORKC";
constexpr size_t kFixedPrefix = 8 + 4 + 4;  // magic, version, header length
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::string Header(const EntryIdentity& id, absl::string_view payload) {
  return absl::StrCat("tailor_version=", id.tailor_version,
                      "\ncompiler=", id.compiler, "\narch=", id.arch,
                      "\nspec=", id.spec, "\nspec_hash=", id.spec_hash.Hex(),
                      "\nsource_hash=", id.source_hash.Hex(),
                      "\nheaders_hash=", id.headers_hash.Hex(),
                      "\npayload_size=", payload.size(),
                      "\npayload_xxh3=", Checksum64(payload), "\n");
}

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

ReadResult Reject(EntryProblem problem, std::string detail) {
  return ReadResult{.problem = problem, .detail = std::move(detail)};
}

// Compares the header's fields with what this process expects.
ReadResult CheckHeader(absl::string_view header, const EntryIdentity& id,
                       size_t payload_size, absl::string_view payload) {
  absl::flat_hash_map<std::string, std::string> fields;
  for (absl::string_view line :
       absl::StrSplit(header, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    fields[kv.first] = kv.second;
  }
  const std::pair<const char*, std::string> expected[] = {
      {"tailor_version", id.tailor_version},
      {"compiler", id.compiler},
      {"arch", id.arch},
      {"spec", id.spec},
      {"spec_hash", id.spec_hash.Hex()},
      {"source_hash", id.source_hash.Hex()},
      {"headers_hash", id.headers_hash.Hex()},
  };
  for (const auto& [name, value] : expected) {
    auto it = fields.find(name);
    if (it == fields.end())
      return Reject(EntryProblem::kCorrupt, absl::StrCat("no ", name));
    if (it->second != value) {
      return Reject(EntryProblem::kStale,
                    absl::StrCat(name, " is \"", it->second, "\", expected \"",
                                 value, "\""));
    }
  }
  uint64_t size = 0, checksum = 0;
  if (!absl::SimpleAtoi(fields["payload_size"], &size) ||
      size != payload_size) {
    return Reject(
        EntryProblem::kCorrupt,
        absl::StrCat("payload is ", payload_size, " bytes, header says ",
                     fields["payload_size"], " (truncated?)"));
  }
  if (!absl::SimpleAtoi(fields["payload_xxh3"], &checksum) ||
      checksum != Checksum64(payload)) {
    return Reject(EntryProblem::kCorrupt, "payload checksum mismatch");
  }
  return ReadResult{};
}

// An entry's bytes cut into header and payload, after the checks that need
// no expected identity: magic, format version, header length and checksum.
struct EntryParts {
  EntryProblem problem = EntryProblem::kNone;
  std::string detail;
  absl::string_view header;
  absl::string_view payload;
};

EntryParts SplitEntry(absl::string_view bytes) {
  EntryParts parts;
  auto reject = [&](EntryProblem problem, std::string detail) {
    parts.problem = problem;
    parts.detail = std::move(detail);
    return parts;
  };
  if (bytes.size() < kFixedPrefix || bytes.substr(0, 8) != kMagic)
    return reject(EntryProblem::kCorrupt, "bad magic or truncated prefix");
  uint32_t version = GetLe(bytes.data() + 8, 4);
  if (version != kDiskFormatVersion) {
    return reject(EntryProblem::kStale,
                  absl::StrCat("format version ", version, ", expected ",
                               kDiskFormatVersion));
  }
  uint64_t header_len = GetLe(bytes.data() + 12, 4);
  if (bytes.size() < kFixedPrefix + header_len + 8)
    return reject(EntryProblem::kCorrupt, "truncated header");
  parts.header = bytes.substr(kFixedPrefix, header_len);
  if (GetLe(bytes.data() + kFixedPrefix + header_len, 8) !=
      Checksum64(parts.header)) {
    return reject(EntryProblem::kCorrupt, "header checksum mismatch");
  }
  parts.payload = bytes.substr(kFixedPrefix + header_len + 8);
  return parts;
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
  if (dir.empty()) {
    return absl::FailedPreconditionError(
        "cache_dir: no directory (set TAILOR_CACHE_DIR, XDG_CACHE_HOME or "
        "HOME)");
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0)
    return ErrnoStatus("cannot stat cache directory", dir);
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
  return absl::StrCat(dir_, "/", stem, "-", id.Hash().Hex(), ".tkc");
}

namespace {

absl::string_view FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

// Why a file with status `st` may not be loaded as an entry; empty if it may:
// only a regular file of ours, of sane size.
std::string UnloadableBecause(const struct stat& st) {
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
                        kMaxEntryBytes);
  }
  return "";
}

// Reads the entry file at `path` into `bytes`. A FIFO, device node,
// socket or directory in an entry's place is never opened in a way that can
// block: lstat rejects it first, and the open itself is O_NONBLOCK (the file
// may be swapped between the two) and fstat checked again.
ReadResult ReadEntryFile(const std::string& path, std::string& bytes) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Reject(EntryProblem::kMissing, "");
    return Reject(EntryProblem::kCorrupt,
                  absl::StrCat("lstat: ", std::strerror(errno)));
  }
  if (S_ISLNK(st.st_mode))
    return Reject(EntryProblem::kCorrupt, "entry is a symlink; not followed");
  if (std::string why = UnloadableBecause(st); !why.empty())
    return Reject(EntryProblem::kCorrupt, std::move(why));
  int fd = open(path.c_str(),
                O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Reject(EntryProblem::kMissing, "");
    if (errno == ELOOP)
      return Reject(EntryProblem::kCorrupt, "entry is a symlink; not followed");
    return Reject(EntryProblem::kCorrupt,
                  absl::StrCat("open: ", std::strerror(errno)));
  }
  std::string why = fstat(fd, &st) == 0
                        ? UnloadableBecause(st)
                        : absl::StrCat("fstat: ", std::strerror(errno));
  if (why.empty()) {
    bytes.resize(st.st_size);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += n;
    }
    bytes.resize(done);
  }
  close(fd);
  if (!why.empty()) return Reject(EntryProblem::kCorrupt, std::move(why));
  return ReadResult{};
}

}  // namespace

ReadResult ParseEntry(absl::string_view bytes, const EntryIdentity& id) {
  EntryParts parts = SplitEntry(bytes);
  if (parts.problem != EntryProblem::kNone)
    return Reject(parts.problem, std::move(parts.detail));
  ReadResult result =
      CheckHeader(parts.header, id, parts.payload.size(), parts.payload);
  if (result.problem == EntryProblem::kNone)
    result.payload = std::string(parts.payload);
  return result;
}

ReadResult DiskCache::Read(absl::string_view stem,
                           const EntryIdentity& id) const {
  std::string bytes;
  ReadResult file = ReadEntryFile(EntryPath(stem, id), bytes);
  if (file.problem != EntryProblem::kNone) return file;
  return ParseEntry(bytes, id);
}

absl::Status DiskCache::Write(absl::string_view stem, const EntryIdentity& id,
                              absl::string_view payload) const {
  std::string header = Header(id, payload);
  std::string prefix(kMagic);
  PutU32(prefix, kDiskFormatVersion);
  PutU32(prefix, static_cast<uint32_t>(header.size()));
  std::string trailer;
  PutU64(trailer, Checksum64(header));

  std::string path = EntryPath(stem, id);
  std::string tmp =
      absl::StrCat(path, ".tmp.", getpid(), ".", std::random_device{}());
  int fd = -1;
  if (int err = InjectedFault(WriteStep::kCreate); err != 0) {
    errno = err;
  } else {
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
  }
  if (fd < 0) return ErrnoStatus("cannot create cache entry", tmp);
  bool ok = true;
  for (absl::string_view part :
       {absl::string_view(prefix), absl::string_view(header),
        absl::string_view(trailer), payload}) {
    size_t done = 0;
    while (ok && done < part.size()) {
      ssize_t n = WriteSome(fd, part.data() + done, part.size() - done);
      if (n <= 0)
        ok = false;
      else
        done += n;
    }
  }
  absl::Status status =
      ok ? absl::OkStatus() : ErrnoStatus("cannot write cache entry", tmp);
  int close_error = close(fd) != 0 ? errno : InjectedFault(WriteStep::kClose);
  if (close_error != 0 && status.ok()) {
    errno = close_error;
    status = ErrnoStatus("cannot close cache entry", tmp);
  }
  if (status.ok()) {
    int rename_fault = InjectedFault(WriteStep::kRename);
    if (rename_fault != 0) errno = rename_fault;
    if (rename_fault != 0 || rename(tmp.c_str(), path.c_str()) != 0)
      status = ErrnoStatus("cannot rename cache entry into", path);
  }
  if (!status.ok()) unlink(tmp.c_str());
  return status;
}

std::string EntryInspection::Field(absl::string_view name) const {
  for (const auto& [key, value] : fields) {
    if (key == name) return value;
  }
  return "";
}

EntryInspection InspectEntryFile(const std::string& path, bool verify_payload) {
  EntryInspection result;
  auto reject = [&](EntryProblem problem, std::string detail) {
    result.problem = problem;
    result.detail = std::move(detail);
    return result;
  };
  // O_NONBLOCK: a FIFO planted in the directory must not hang the tool.
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return reject(
        errno == ENOENT ? EntryProblem::kMissing : EntryProblem::kCorrupt,
        absl::StrCat("open: ", std::strerror(errno)));
  }
  struct stat st;
  std::string bytes;
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                 static_cast<uint64_t>(st.st_size) <= kMaxEntryBytes;
  if (regular) {
    // Without the payload check, the header (well under 64 KiB) suffices.
    constexpr uint64_t kHeaderBytes = 64 * 1024;
    bytes.resize(verify_payload ? st.st_size
                                : std::min<uint64_t>(st.st_size, kHeaderBytes));
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += n;
    }
    bytes.resize(done);
  }
  close(fd);
  if (!regular)
    return reject(EntryProblem::kCorrupt, "not a regular file of sane size");
  EntryParts parts = SplitEntry(bytes);
  if (parts.problem != EntryProblem::kNone)
    return reject(parts.problem, std::move(parts.detail));
  for (absl::string_view line :
       absl::StrSplit(parts.header, '\n', absl::SkipEmpty())) {
    result.fields.push_back(absl::StrSplit(line, absl::MaxSplits('=', 1)));
  }
  if (!verify_payload) return result;
  uint64_t size = 0, checksum = 0;
  if (!absl::SimpleAtoi(result.Field("payload_size"), &size) ||
      size != parts.payload.size()) {
    return reject(EntryProblem::kCorrupt,
                  absl::StrCat("payload is ", parts.payload.size(),
                               " bytes, header says ",
                               result.Field("payload_size"), " (truncated?)"));
  }
  if (!absl::SimpleAtoi(result.Field("payload_xxh3"), &checksum) ||
      checksum != Checksum64(parts.payload)) {
    return reject(EntryProblem::kCorrupt, "payload checksum mismatch");
  }
  return result;
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
