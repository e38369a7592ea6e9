// backends/cpu/clang_compiler.h — C++ source -> host object file, in process.
//
// Uses the Clang 14 libraries (no subprocess), in three phases:
//   frontend  the source and every embedded templates/ and runtime/ file are
//             served from an in-memory file system; clang parses, instantiates
//             and emits unoptimized LLVM IR for the host CPU
//   optimize  clang's -O2 IR pipeline (PassBuilder, the target's cost model)
//   codegen   the target machine writes an ELF object, at codegen -O1 (no
//             post-RA scheduling: see kCodegenLevel in the .cc)
// The object is what the kernel cache stores on disk. Kernels are hermetic:
// no system or builtin headers are visible, so they include only tailor's
// runtime/cpu headers.
//
// Compile time is mostly the optimize and codegen phases (the frontend is a
// small share) and grows with the code left after loop unrolling,
// so the templates say which loops to unroll (runtime/cpu/tailor_cpu.h);
// compile_time_bench prints the split per variant.
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

// "clang-14.0.6 -O2 codegen-O1 -mcmodel=large <triple> <cpu> features:<hash>":
// part of cache keys.
std::string ClangCompilerIdentity(const HostTarget& target);

// CPU time of the compiling thread per phase, in milliseconds.
struct CompilePhaseTimes {
  double frontend_ms = 0;  // parse, instantiate, emit IR
  double optimize_ms = 0;  // the IR pipeline
  double codegen_ms = 0;   // instruction selection .. object file
  double total_ms() const { return frontend_ms + optimize_ms + codegen_ms; }
};

// Compiles `code` (C++20) to an object file for `target`. Internal with the
// compiler's diagnostics attached when the code does not compile. `times`
// (optional) receives the phases' CPU time (phases not reached: 0).
absl::StatusOr<std::string> CompileToObject(absl::string_view code,
                                            const HostTarget& target,
                                            CompilePhaseTimes* times = nullptr);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_CLANG_COMPILER_H_
