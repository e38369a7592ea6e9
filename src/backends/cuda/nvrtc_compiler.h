// backends/cuda/nvrtc_compiler.h — CUDA C++ source -> cubin with NVRTC.
//
// The generated source of a CUDA kernel is "includes plus one extern "C"
// __global__ wrapper": `KernelSource::entry` must name that wrapper, because
// the loader looks the function up by that (unmangled) name, possibly in a
// cubin another process compiled.
//
// Includes are served in memory: every embedded file under runtime/cuda/ and
// templates/cuda/ (core/embedded_files.h) is passed to NVRTC under its path,
// so `#include "runtime/cuda/tma.cuh"` resolves without a source tree. When
// the CUDA toolkit's headers are found next to the loaded NVRTC (or under
// $CUDA_HOME, /usr/local/cuda), `-I<toolkit>/include/cccl -I<toolkit>/include`
// make CCCL (<cuda/ptx>, <cuda/std/...>) and <cuda_bf16.h> available too;
// tailor's own runtime headers need neither.
//
// Flags: -std=c++20 -default-device -arch=<arch> [-minimal] [-lineinfo]
// [--use_fast_math] [-pch] [-I...]. The identity string (part of every disk
// cache entry) names the NVRTC version and every flag but -arch (the arch is
// in the key).
//
// Thread-safe: Compile may run on many threads at once (one NVRTC program per
// call).
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(NvrtcCompiler compiler, NvrtcCompiler::Create({}));
//   TAILOR_ASSIGN_OR_RETURN(NvrtcCompiler::Output out,
//                           compiler.Compile(source, "sm_90a"));
//   // out.cubin: load with cuModuleLoadData
#ifndef TAILOR_BACKENDS_CUDA_NVRTC_COMPILER_H_
#define TAILOR_BACKENDS_CUDA_NVRTC_COMPILER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/cuda/nvrtc_api.h"
#include "core/backend.h"

namespace tailor::cuda {

struct NvrtcCompilerOptions {
  // -lineinfo: source lines for profilers and compute-sanitizer.
  bool line_info = false;
  // --use_fast_math: off, so results match the references.
  bool fast_math = false;
  // -pch: NVRTC's automatic precompiled headers. Off: tailor's runtime
  // headers need no CCCL, and it pays only for templates that include CCCL
  // (bench/results/compile_time.txt, "NVRTC flags"). It also writes temp
  // files under /tmp.
  bool precompiled_headers = false;
  // -minimal (NVRTC 12.4 and newer; ignored before): leaves out texture and
  // surface functions, cudadevrt's cuda* device functions, launches from
  // device code and the CUDA runtime / driver API types, none of which a
  // kernel template uses. The frontend parses less for every compile, and
  // the SASS stays the same (bench/results/compile_time.txt, "NVRTC
  // flags").
  bool minimal = true;
  // Adds the toolkit include dirs when found (CCCL, cuda_bf16.h).
  bool toolkit_includes = true;
  // Appended verbatim after the flags above; part of the identity.
  std::vector<std::string> extra_flags = {};
};

class NvrtcCompiler {
 public:
  struct Output {
    std::string cubin;  // ELF, for cuModuleLoadData
    std::string ptx;    // only when requested
    std::string log;    // NVRTC's log (warnings), often empty
  };

  // Loads NVRTC (Unavailable when absent) and fixes the flags.
  static absl::StatusOr<NvrtcCompiler> Create(
      const NvrtcCompilerOptions& options);

  // Compiles `source` for `arch` ("sm_90a" for Hopper TMA/wgmma/
  // tensormap.replace; "sm_80", "sm_89", "sm_90" generic). InvalidArgument
  // for a malformed arch or an empty entry; Internal with the NVRTC log when
  // the source does not compile.
  absl::StatusOr<Output> Compile(const tailor::internal::KernelSource& source,
                                 absl::string_view arch,
                                 bool want_ptx = false) const;

  // "nvrtc 13.0 -std=c++20 -default-device -I/usr/local/cuda-13.0/include/cccl
  // ..."
  const std::string& identity() const { return identity_; }
  // Flags passed to every compile, -arch excluded.
  const std::vector<std::string>& flags() const { return flags_; }
  // The toolkit include dir in use; empty when none was found or wanted.
  const std::string& toolkit_include_dir() const {
    return toolkit_include_dir_;
  }
  const NvrtcApi& api() const { return *api_; }

 private:
  NvrtcCompiler() = default;

  const NvrtcApi* api_ = nullptr;
  std::vector<std::string> flags_;
  std::string identity_;
  std::string toolkit_include_dir_;
  // In-memory headers: paths and NUL-terminated contents of the embedded
  // runtime/cuda/ and templates/cuda/ files.
  std::vector<const char*> header_names_;
  std::vector<const char*> header_contents_;
};

// OkStatus when `arch` is "sm_<major><minor>" with an optional "a" or "f"
// suffix, e.g. "sm_80", "sm_90a"; InvalidArgument otherwise.
absl::Status ValidateCudaArch(absl::string_view arch);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_NVRTC_COMPILER_H_
