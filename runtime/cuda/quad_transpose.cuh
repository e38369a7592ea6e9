// runtime/cuda/quad_transpose.cuh — a 4 x 4 transpose of 32-bit words
// across a quad of lanes (lanes 4 g .. 4 g + 3), for epilogues that hold an
// mma accumulator layout (lane 4 g + t: columns 8 j + 2 t, + 1 of each n8
// group j) and want to store whole groups: transposed over groups 4 i ..
// 4 i + 3, lane t holds group 4 i + t's 8 columns, one vector store.
//
// Contract: device-only code for NVRTC; called by all 32 lanes together.
#ifndef TAILOR_RUNTIME_CUDA_QUAD_TRANSPOSE_CUH_
#define TAILOR_RUNTIME_CUDA_QUAD_TRANSPOSE_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

// Afterwards lane t's v[r] is lane r's v[t] before (t = lane % 4): two
// butterfly rounds over 2 x 2 blocks, with selects rather than a register
// index by lane (which would go to local memory).
TAILOR_DEVICE void QuadTranspose(unsigned (&v)[4]) {
  const int t = threadIdx.x % 4;
  const bool odd = (t & 1) != 0, high = (t & 2) != 0;
  unsigned s0 = __shfl_xor_sync(0xffffffffu, odd ? v[0] : v[1], 1);
  unsigned s1 = __shfl_xor_sync(0xffffffffu, odd ? v[2] : v[3], 1);
  v[0] = odd ? s0 : v[0];
  v[1] = odd ? v[1] : s0;
  v[2] = odd ? s1 : v[2];
  v[3] = odd ? v[3] : s1;
  s0 = __shfl_xor_sync(0xffffffffu, high ? v[0] : v[2], 2);
  s1 = __shfl_xor_sync(0xffffffffu, high ? v[1] : v[3], 2);
  v[0] = high ? s0 : v[0];
  v[2] = high ? v[2] : s0;
  v[1] = high ? s1 : v[1];
  v[3] = high ? v[3] : s1;
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_QUAD_TRANSPOSE_CUH_
