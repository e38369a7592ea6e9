// backends/cpu/orc_loader.h — loads host object files into an ORC LLJIT.
//
// Each loaded object gets its own JITDylib, so every kernel module may export
// the same entry symbol; the JITDylib is removed when the last reference to
// the loaded kernel goes away. External symbols (libm, memcpy, ...) resolve
// against the current process.
#ifndef TAILOR_BACKENDS_CPU_ORC_LOADER_H_
#define TAILOR_BACKENDS_CPU_ORC_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace llvm::orc {
class LLJIT;
class JITDylib;
}  // namespace llvm::orc

namespace tailor::internal::cpu {

// The entry ABI every CPU kernel exports (runtime/cpu/tailor_cpu.h):
// runs work items [begin, end) with one params struct.
using CpuEntry = void (*)(const void* params, int64_t begin, int64_t end);

class LoadedObject {
 public:
  LoadedObject(std::shared_ptr<llvm::orc::LLJIT> jit,
               llvm::orc::JITDylib* dylib, CpuEntry entry);
  ~LoadedObject();
  CpuEntry entry() const { return entry_; }

 private:
  std::shared_ptr<llvm::orc::LLJIT> jit_;
  llvm::orc::JITDylib* dylib_;
  CpuEntry entry_;
};

class OrcLoader {
 public:
  static absl::StatusOr<std::unique_ptr<OrcLoader>> Create();

  // Links `object` and resolves `entry_symbol`. Internal (with LLVM's message)
  // if the object is malformed or the symbol is missing.
  absl::StatusOr<std::unique_ptr<LoadedObject>> Load(
      absl::string_view object, absl::string_view entry_symbol);

 private:
  explicit OrcLoader(std::shared_ptr<llvm::orc::LLJIT> jit)
      : jit_(std::move(jit)) {}
  std::shared_ptr<llvm::orc::LLJIT> jit_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_ORC_LOADER_H_
