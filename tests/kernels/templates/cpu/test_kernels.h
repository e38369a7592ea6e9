// templates/cpu/test_kernels.h — the smallest kernel families.
//
// EmptyKernel does nothing: it measures dispatch overhead. AxpyKernel computes
// y[i] = a * x[i] + y[i] over blocks of kBlock elements, one block per work
// item; it exercises the JIT path end to end (compile, cache, reload) in
// tests and in the first example. Params are shared with the host side in
// src/ops/test_ops.h: keep the layouts identical.
#ifndef TAILOR_TEMPLATES_CPU_TEST_KERNELS_H_
#define TAILOR_TEMPLATES_CPU_TEST_KERNELS_H_

#include "runtime/cpu/tailor_cpu.h"

namespace tailor::kernels {

struct EmptyKernel {
  struct Params {
    int64_t unused;
  };
  static void Run(const Params&, int64_t) {}
};

template <int kBlock>
struct AxpyKernel {
  static_assert(kBlock > 0 && kBlock % 8 == 0,
                "kBlock must be a positive multiple of 8");
  struct Params {
    const float* x;  // [n]
    float* y;        // [n]
    int64_t n;
    float a;
  };
  static void Run(const Params& p, int64_t item) {
    int64_t begin = item * kBlock;
    int64_t end = Min<int64_t>(begin + kBlock, p.n);
    for (int64_t i = begin; i < end; ++i) p.y[i] = p.a * p.x[i] + p.y[i];
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_TEST_KERNELS_H_
