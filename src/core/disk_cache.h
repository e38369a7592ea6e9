// core/disk_cache.h — one file per kernel binary, safe against hostile disks.
//
// Directory: created 0700. A directory that is not ours (owner != euid) or is
// group/world-writable is refused (Open returns FailedPrecondition with the
// reason; the runtime logs it and keeps working from memory).
//
// Entry file "<stem>-<identity hash>.tkc":
//   "TAILORKC" | u32 format version | u32 header length | header (text lines
//   "name=value") | u64 xxh3 of the header | payload.
// The header names everything the binary depends on (tailor version, compiler
// identity, arch, spec, source hash, runtime-headers hash, payload size and
// xxh3). Read verifies all of it: a truncated, bit-flipped, wrong-version or
// wrong-arch entry is a miss (Corrupt / Stale), never loaded and never a
// crash. Only a regular file owned by this user is read: an entry path that
// is a FIFO, device node, socket or directory is Corrupt without ever being
// opened in a way that could block, and so is one owned by another user or
// larger than 1 GiB. Writes go to a temp file opened O_CREAT|O_EXCL|O_NOFOLLOW
// in the same directory, then rename() into place, so readers never see a
// partial entry and concurrent writers of one key are harmless. Entry paths
// that are symlinks are not followed. A writer killed mid-write leaves only its
// temp file; Open removes temp files older than kStaleTempSeconds (younger ones
// may belong to a live writer in another process).
#ifndef TAILOR_CORE_DISK_CACHE_H_
#define TAILOR_CORE_DISK_CACHE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/hash.h"

namespace tailor::internal {

inline constexpr uint32_t kDiskFormatVersion = 1;
inline constexpr int kStaleTempSeconds = 600;

// Everything a binary depends on. Two identities are equal iff the binary
// may be reused.
struct EntryIdentity {
  std::string tailor_version;
  std::string compiler;  // compiler name, version and flags
  std::string arch;      // exact target
  std::string spec;      // SpecKey::ToString()
  Hash128 spec_hash;
  Hash128 source_hash;   // generated source
  Hash128 headers_hash;  // runtime/ + templates/ of the backend

  Hash128 Hash() const;
};

enum class EntryProblem { kNone, kMissing, kCorrupt, kStale };

struct ReadResult {
  EntryProblem problem = EntryProblem::kNone;
  std::string detail;   // why it was rejected, for the log
  std::string payload;  // valid only when problem == kNone
};

class DiskCache {
 public:
  // Creates (0700) and checks `dir`. FailedPrecondition when it is unsafe.
  static absl::StatusOr<DiskCache> Open(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string EntryPath(absl::string_view stem, const EntryIdentity& id) const;

  ReadResult Read(absl::string_view stem, const EntryIdentity& id) const;
  // Atomically writes (or replaces) the entry.
  absl::Status Write(absl::string_view stem, const EntryIdentity& id,
                     absl::string_view payload) const;

 private:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// What an entry file says about itself, for tools (tailor-cache).
struct EntryInspection {
  EntryProblem problem = EntryProblem::kNone;
  std::string detail;  // why it is bad
  // The header's "name=value" lines in order (empty when unreadable).
  std::vector<std::pair<std::string, std::string>> fields;

  // The value of header field `name`; empty when there is none.
  std::string Field(absl::string_view name) const;
};

// Reads the entry file at `path` and checks everything that needs no
// expected identity: magic, format version (kStale when another), header
// checksum and, with `verify_payload`, the payload's size and xxh3 (else
// only the header is read). Symlinks, FIFOs, devices and directories are
// kCorrupt: never followed, never blocked on.
EntryInspection InspectEntryFile(const std::string& path, bool verify_payload);

// Verifies the bytes of an entry file against `id` and extracts the payload:
// what Read does once the file is read. Never reads past `bytes`; for tests
// and the fuzzer.
ReadResult ParseEntry(absl::string_view bytes, const EntryIdentity& id);

// Fault injection, for tests only (tests/reliability/disk_faults_test.cc):
// while a hook is set, Write asks it before each step it takes on the
// filesystem, and a nonzero answer is the errno that step fails with. A
// failing kWrite first writes half of what it was asked to (as a filling disk
// does), so a partial temp file really exists before the failure. Thread-safe;
// SetWriteFaultHookForTesting(nullptr) removes the hook.
//
//   SetWriteFaultHookForTesting([](WriteStep step) {
//     return step == WriteStep::kWrite ? ENOSPC : 0;  // the disk is full
//   });
enum class WriteStep { kCreate, kWrite, kClose, kRename };
using WriteFaultHook = std::function<int(WriteStep step)>;
void SetWriteFaultHookForTesting(WriteFaultHook hook);

// The default directory: $TAILOR_CACHE_DIR, else $XDG_CACHE_HOME/tailor,
// else $HOME/.cache/tailor. Empty if none of these is set.
std::string DefaultCacheDir();

}  // namespace tailor::internal

#endif  // TAILOR_CORE_DISK_CACHE_H_
