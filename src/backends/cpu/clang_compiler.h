// backends/cpu/clang_compiler.h — C++ source -> host object file, in process.
//
// Uses the Clang 14 libraries (no subprocess): the source and every embedded
// templates/ and runtime/ file are served from an in-memory file system, the
// frontend emits LLVM IR at -O3 for the host CPU, and the target machine
// writes an ELF object. The object is what the kernel cache stores on disk.
// Kernels are hermetic: no system or builtin headers are visible, so they
// include only tailor's runtime/cpu headers.
//
// Objects use the large code model: the loader maps an object's sections
// one by one, wherever the address space has room, so its code and its
// constants may end up terabytes apart (a CUDA context or a mapped model
// file in between). The small model's 32-bit PC-relative references would
// wrap around; the large model's are 64-bit.
#ifndef TAILOR_BACKENDS_CPU_CLANG_COMPILER_H_
#define TAILOR_BACKENDS_CPU_CLANG_COMPILER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tailor::internal::cpu {

struct HostTarget {
  std::string triple;    // "x86_64-pc-linux-gnu"
  std::string cpu;       // "znver3"
  std::string features;  // "+avx2,+fma,..." (comma-separated)
};

// The CPU this process runs on. Initializes the native LLVM target once.
const HostTarget& GetHostTarget();

// "clang-14.0.6 -O3 -mcmodel=large <triple> <cpu> features:<hash>": part of
// cache keys.
std::string ClangCompilerIdentity(const HostTarget& target);

// Compiles `code` (C++20) to an object file for `target`. Internal with the
// compiler's diagnostics attached when the code does not compile.
absl::StatusOr<std::string> CompileToObject(absl::string_view code,
                                            const HostTarget& target);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_CLANG_COMPILER_H_
