// backends/hip/hiprtc_compiler.h — HIP C++ source -> AMDGPU code object with
// hiprtc, for one gfx target.
//
// The generated source of a HIP kernel is "includes plus one extern "C"
// __global__ wrapper" (runtime/hip/entry.h); `KernelSource::entry` names
// that wrapper, which the loader looks up with hipModuleGetFunction.
//
// Includes are served in memory: every embedded file under runtime/hip/,
// templates/hip/, and the vendor-neutral CUDA sources the HIP templates
// reuse (runtime/cuda/, templates/cuda/; see runtime/hip/cuda_compat.h),
// passed to hiprtc under its path.
//
// Targets: "gfx90a" (MI200), "gfx940"/"gfx941"/"gfx942" (MI300), with
// optional target features ("gfx90a:sramecc+:xnack-"). hiprtc compiles
// through the code-object manager (comgr), and a target comgr does not know
// is refused here with Unimplemented: hiprtc from ROCm 5.2 does not report
// it, it aborts the process (a free of an invalid pointer inside
// amd_comgr_destroy_action_info). Debian 12's ROCm 5.2 comgr knows gfx90a
// but none of gfx940/941/942 (its LLVM 15 knows gfx940, its ISA table does
// not; gfx941/942 came with later LLVMs).
//
// Flags: --gpu-architecture=<target> -O3 -std=c++17 [extra]. The identity
// string (part of every disk cache entry) names hiprtc's version, the
// library it came from, and every flag but the target (which is in the key).
//
// Thread-safe: Compile may run on many threads at once.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(HiprtcCompiler compiler,
//                           HiprtcCompiler::Create({}));
//   TAILOR_ASSIGN_OR_RETURN(HiprtcCompiler::Output out,
//                           compiler.Compile(source, "gfx90a"));
//   // out.code_object: load with hipModuleLoadData
#ifndef TAILOR_BACKENDS_HIP_HIPRTC_COMPILER_H_
#define TAILOR_BACKENDS_HIP_HIPRTC_COMPILER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/hip/hip_api.h"
#include "core/backend.h"

namespace tailor::hip {

struct HiprtcCompilerOptions {
  // Appended verbatim after the fixed flags; part of the identity.
  std::vector<std::string> extra_flags = {};
};

class HiprtcCompiler {
 public:
  struct Output {
    std::string code_object;  // ELF (amdgcn-amd-amdhsa), for hipModuleLoadData
    std::string log;          // hiprtc's log (warnings), often empty
  };

  // Loads hiprtc (Unavailable when absent) and fixes the flags.
  static absl::StatusOr<HiprtcCompiler> Create(
      const HiprtcCompilerOptions& options);

  // Compiles `source` for `target`. InvalidArgument for a malformed target
  // or an empty entry; Unimplemented when the code-object manager does not
  // know the target; Internal with hiprtc's log when the source does not
  // compile.
  absl::StatusOr<Output> Compile(const tailor::internal::KernelSource& source,
                                 absl::string_view target) const;

  // OkStatus when this hiprtc can compile for `target` (see Compile).
  absl::Status CheckTarget(absl::string_view target) const;

  // "hiprtc 9.0 (libamdhip64.so.5.2.21153) -O3 -std=c++17"
  const std::string& identity() const { return identity_; }
  const std::vector<std::string>& flags() const { return flags_; }
  const HiprtcApi& api() const { return *api_; }

 private:
  HiprtcCompiler() = default;

  const HiprtcApi* api_ = nullptr;
  std::vector<std::string> flags_;
  std::string identity_;
  std::vector<const char*> header_names_;
  std::vector<const char*> header_contents_;
};

// OkStatus when `target` is "gfx" + 3 or 4 hex digits with optional
// ":feature+" / ":feature-" parts (e.g. "gfx90a", "gfx942:sramecc+:xnack-");
// InvalidArgument otherwise.
absl::Status ValidateGfxTarget(absl::string_view target);

// "gfx90a" for "gfx90a:sramecc+:xnack-".
absl::string_view GfxProcessor(absl::string_view target);

// True for the wave64 Instinct (CDNA) processors tailor's HIP kernels are
// written for: gfx908, gfx90a, gfx940, gfx941, gfx942.
bool IsCdnaProcessor(absl::string_view processor);

// True for the processors with the bf16 "_1k" MFMA instructions the MFMA
// grouped GEMM is built on: gfx90a, gfx940, gfx941, gfx942 (not gfx908).
bool HasMfmaBf16(absl::string_view processor);

}  // namespace tailor::hip

#endif  // TAILOR_BACKENDS_HIP_HIPRTC_COMPILER_H_
