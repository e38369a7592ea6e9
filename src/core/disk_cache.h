// core/disk_cache.h — one file per kernel binary, safe against hostile disks.
//
// Directory: created 0700. A directory that is not ours (owner != euid) or is
// group/world-writable is refused (Open returns FailedPrecondition with the
// reason; the runtime logs it and keeps working from memory).
//
// Entry file "<stem>-<identity hash>.tkc" (EntryFileName):
//   "TAILORKC" | u32 format version | u32 header length | header (text lines
//   "name=value") | u64 xxh3 of the header | payload.
// The header names everything the binary depends on (tailor version, compiler
// identity, arch, spec, source hash, runtime-headers hash, payload size and
// xxh3). One validator (CheckEntryFile's rules) serves the runtime (Read,
// against the identity it expects) and the tools (InspectEntryFile, against
// the identity the header states, which must be the one the file is named
// for): a truncated, bit-flipped, wrong-version, wrong-arch or misnamed entry
// is a miss (Corrupt / Stale), never loaded and never a crash.
//
// Reading is lazy and bounded: only a regular file owned by this user and no
// larger than kMaxEntryBytes is opened (a FIFO, device node, socket, directory
// or symlink is Corrupt without ever being opened in a way that could block);
// the prefix and header are read and checked first, and the payload only when
// the header matches and its size is exactly what the file holds.
//
// Writes go to a temp file opened O_CREAT|O_EXCL|O_NOFOLLOW in the same
// directory, then rename() into place, so readers never see a partial entry
// and concurrent writers of one key are harmless. Whatever non-regular file
// sits at an entry's name (a directory, which rename() cannot replace, a
// FIFO, a symlink) is removed by the write. A writer killed mid-write leaves
// only its temp file; Open removes temp files older than kStaleTempSeconds
// (younger ones may belong to a live writer in another process).
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
// What an entry can be. Kernel binaries are CPU objects of a few KB and
// CUDA cubins of at most a few hundred KB (bench/results/compile_time.txt),
// headers a few hundred bytes: these caps are two orders of magnitude above
// both, and bound what a hostile file costs.
inline constexpr uint64_t kMaxEntryHeaderBytes = uint64_t{64} << 10;
inline constexpr uint64_t kMaxEntryPayloadBytes = uint64_t{64} << 20;
inline constexpr uint64_t kEntryPrefixBytes =
    8 + 4 + 4;  // magic, version, length
inline constexpr uint64_t kMaxEntryBytes =
    kEntryPrefixBytes + kMaxEntryHeaderBytes + 8 + kMaxEntryPayloadBytes;

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

// The bytes of the entry for `id` that come before `payload`: prefix, header
// and header checksum.
std::string EntryHead(const EntryIdentity& id, absl::string_view payload);
// "<stem>-<identity hash>.tkc": the file name of the entry for `id`.
std::string EntryFileName(absl::string_view stem, const EntryIdentity& id);
// The stem of the entry for the key whose SpecKey::ToString() is `spec`: the
// spec with every character outside [A-Za-z0-9._-] made '_', at most 120
// characters. SpecKey::FileStem() is this (tests/core checks they agree).
std::string EntryFileStem(absl::string_view spec);

class DiskCache {
 public:
  // Creates (0700) and checks `dir`. FailedPrecondition when it is unsafe.
  static absl::StatusOr<DiskCache> Open(std::string dir);
  // Checks `dir` like Open but never creates it: NotFound when it does not
  // exist (tools, so that a mistyped --cache-dir is not made).
  static absl::StatusOr<DiskCache> OpenExisting(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string EntryPath(absl::string_view stem, const EntryIdentity& id) const;

  ReadResult Read(absl::string_view stem, const EntryIdentity& id) const;
  // Atomically writes (or replaces) the entry, first removing a non-regular
  // file in its place. InvalidArgument when `payload` is over
  // kMaxEntryPayloadBytes (no reader would accept it).
  absl::Status Write(absl::string_view stem, const EntryIdentity& id,
                     absl::string_view payload) const;

 private:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}
  static absl::StatusOr<DiskCache> OpenChecked(std::string dir, bool create);
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

// Checks the entry file at `path` as the runtime would, knowing no expected
// identity: the file (regular, ours, within kMaxEntryBytes), magic, format
// version (kStale when another), header checksum, the identity fields, and
// that the file's name is EntryFileName for the identity its header states
// (kStale when not: a copy under another kernel's name, which the runtime
// would reject); then the payload's size and, with `verify_payload`, its
// xxh3, read in chunks (else only the prefix and header are read). Symlinks,
// FIFOs, devices and directories are kCorrupt: never followed, never
// blocked on.
EntryInspection InspectEntryFile(const std::string& path, bool verify_payload);

// Verifies the bytes of an entry file against `id` and extracts the payload:
// what Read does once the file is read. Never reads past `bytes`; for tests
// and the fuzzer.
ReadResult ParseEntry(absl::string_view bytes, const EntryIdentity& id);
// InspectEntryFile's checks on the bytes of a file named `file_name`.
EntryInspection InspectEntryBytes(absl::string_view bytes,
                                  absl::string_view file_name,
                                  bool verify_payload);

// Removes whatever non-regular file is at `path`: a symlink (not what it
// points to), FIFO, device node or socket, or a directory with everything
// under it (never leaving its filesystem, never following a link). A regular
// file or nothing there is left alone (OK). For the cache's own directory
// only: the runtime and tailor-cache use it to clear an entry's name or the
// size counter's.
absl::Status RemoveNonRegularFile(const std::string& path);

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
