// tests/kernels/cuda_test_kernels.h — generators of tailor's CUDA test
// kernels (templates/cuda/test_kernels.cuh, tma_patch_test.cuh,
// tma_copy_test.cuh), for tests, benches and the test op fronts.
//
// Each generator emits includes plus one extern "C" __global__ wrapper that
// instantiates the device template for the key (DeepGEMM-style), named by
// KernelSource::entry. Keys:
//   kTestEmptyOp    no fields
//   kTestAxpyOp     dims[0] = unroll (1..16)
//   kTmaPatchTestOp dtypes[0] in {bf16, f16, f32}, dims[0] = cols, tile.m =
//                 tile rows, variant = kTmaPatch* bits (tma_test_params.h)
//   kTmaCopyTestOp  as kTmaPatchTestOp, variant = 0
// TMA keys need cols * element bytes a multiple of 16, cols and tile rows in
// [1, 256], and a tile of at most kMaxTmaTestTileBytes.
//
// Example:
//   SpecKey key = engine.MakeKey(tailor::internal::kTmaPatchTestOp);
//   key.dtypes[0] = DType::kBF16;
//   key.dims[0] = 128;  // cols
//   key.tile.m = 64;    // tile rows
//   TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
//                           engine.GetKernel(key, GenerateCudaTestKernel));
//   LaunchConfig config;
//   config.grid = {num_items};
//   config.block = {kTmaTestBlockThreads};
//   config.shared_bytes = TmaTestSharedBytesFor(key);
#ifndef TAILOR_TESTS_KERNELS_CUDA_TEST_KERNELS_H_
#define TAILOR_TESTS_KERNELS_CUDA_TEST_KERNELS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/spec_key.h"
#include "kernels/test_op_kinds.h"

namespace tailor::cuda {

inline constexpr uint32_t kTmaTestBlockThreads =
    128;  // kTmaTestThreads in the template
inline constexpr int64_t kMaxTmaTestTileBytes = 200 * 1024;

// The source for a test key; InvalidArgument naming the field for a key the
// templates cannot instantiate, Unimplemented for other ops.
absl::StatusOr<tailor::internal::KernelSource> GenerateCudaTestKernel(
    const tailor::internal::SpecKey& key);

// Bytes of one tile of a TMA test key: tile.m * dims[0] * element bytes.
int64_t TmaTestTileBytes(const tailor::internal::SpecKey& key);
// Dynamic shared memory a TMA test key's kernel needs.
uint32_t TmaTestSharedBytesFor(const tailor::internal::SpecKey& key);

}  // namespace tailor::cuda

#endif  // TAILOR_TESTS_KERNELS_CUDA_TEST_KERNELS_H_
