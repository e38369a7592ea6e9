// templates/cuda/tma_test_common.cuh — pieces shared by tma_patch_test.cuh
// and tma_copy_test.cuh (sm_90+): block size, the aligned tile inside
// dynamic shared memory, and the debug copy of a tile.
#ifndef TAILOR_TEMPLATES_CUDA_TMA_TEST_COMMON_CUH_
#define TAILOR_TEMPLATES_CUDA_TMA_TEST_COMMON_CUH_

#include "runtime/cuda/arch.cuh"
#include "templates/cuda/tma_test_params.h"

namespace tailor::cuda {

inline constexpr int kTmaTestThreads = 128;

// The 128-byte aligned tile inside the dynamic shared-memory buffer (the host
// sizes it with TmaTestSharedBytes, which adds the 128 bytes of slack).
TAILOR_DEVICE unsigned char* TmaTestTile() {
  extern __shared__ unsigned char tma_test_dynamic_smem[];
  const unsigned long long address = GenericAddress(tma_test_dynamic_smem);
  return tma_test_dynamic_smem + ((128 - address % 128) % 128);
}

// Copies one tile (`tile_bytes`, a multiple of 16) from shared memory to
// `dst`; all threads of the CTA cooperate.
TAILOR_DEVICE void CopyTileOut(void* dst, const unsigned char* smem_tile,
                               int tile_bytes) {
  const uint4* src = reinterpret_cast<const uint4*>(smem_tile);
  uint4* out = static_cast<uint4*>(dst);
  for (int i = threadIdx.x; i < tile_bytes / 16; i += blockDim.x)
    out[i] = src[i];
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_TMA_TEST_COMMON_CUH_
