// bench/attention_gpu/kernel_table.h — the kernels compiled into the
// development library (kernels.cu, kernels_legacy.cu, decode_kernels.cu),
// for dev_api.cc to look up by variant. Plain C++ (nvcc and g++ both
// include it).
#ifndef TAILOR_BENCH_ATTENTION_GPU_KERNEL_TABLE_H_
#define TAILOR_BENCH_ATTENTION_GPU_KERNEL_TABLE_H_

namespace tailor::attention_dev {

// Designs of the prefill kernel one library holds, for A/B runs on the same
// data: the templates of this tree, and those of the commit that
// scripts/build-attention-dev names as the previous design.
inline constexpr int kDesignCurrent = 0;
inline constexpr int kDesignLegacy = 1;

struct KernelRow {
  const char* name;
  const void* function;  // the host stub, for cudaLaunchKernelExC
  int dtype;             // 0 bf16, 1 f16
  int head_dim;
  int pack;               // 0 for merge kernels; the group for decode ones
  int page_size;          // 0 for merge kernels
  unsigned shared_bytes;  // dynamic shared memory of a launch
  int threads;            // block size
  int design;             // kDesign*; decode kernels: their stages
};

const KernelRow* PrefillKernels(int* count);
const KernelRow* LegacyPrefillKernels(int* count);
const KernelRow* MergeKernels(int* count);
const KernelRow* DecodeKernels(int* count);

}  // namespace tailor::attention_dev

#endif  // TAILOR_BENCH_ATTENTION_GPU_KERNEL_TABLE_H_
