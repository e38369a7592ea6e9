// backends/cpu/moe/fp8.h — the FP8 (e4m3) MoE kernels on the CPU backend:
// generators and launch glue for templates/cpu/moe/fp8_{pack,grouped_gemm}.h
// (params: templates/cpu/moe/fp8_params.h), reached through CpuMoeKernels
// when a launch has a scale mode.
//
// Keys: MoePackSpec / MoeGemmSpec with their scale mode (ops/moe/spec.h).
// The FP8 kernels have no generic kernel: in background-JIT mode a cold FP8
// launch waits for its compile.
#ifndef TAILOR_BACKENDS_CPU_MOE_FP8_H_
#define TAILOR_BACKENDS_CPU_MOE_FP8_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine.h"
#include "ops/moe/kernels.h"
#include "ops/moe/spec.h"

namespace tailor::internal::cpu {

// The sources of a quantizing Pack and of an FP8 grouped GEMM.
KernelSource GenerateFp8Pack(const MoePackSpec& spec);
KernelSource GenerateFp8GroupedGemm(const MoeGemmSpec& spec);

// Launches with a scale mode; `generate` is the CPU's generator of the op
// (the engine's override applies).
absl::Status Fp8Pack(Engine& engine, const PackLaunch& launch,
                     KernelGeneratorFn generate);
absl::Status Fp8GroupedGemm(Engine& engine, const GroupedGemmLaunch& launch,
                            KernelGeneratorFn generate);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_MOE_FP8_H_
