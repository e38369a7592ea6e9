// bench/attention_gpu/kernel_table.h — the kernels compiled into the
// development library (kernels.cu), for dev_api.cc to look up by variant.
// Plain C++ (nvcc and g++ both include it).
#ifndef TAILOR_BENCH_ATTENTION_GPU_KERNEL_TABLE_H_
#define TAILOR_BENCH_ATTENTION_GPU_KERNEL_TABLE_H_

namespace tailor::attention_dev {

struct KernelRow {
  const char* name;
  const void* function;  // the host stub, for cudaLaunchKernelExC
  int dtype;             // 0 bf16, 1 f16
  int head_dim;
  int pack;       // 0 for merge kernels
  int page_size;  // 0 for merge kernels
};

const KernelRow* PrefillKernels(int* count);
const KernelRow* MergeKernels(int* count);

}  // namespace tailor::attention_dev

#endif  // TAILOR_BENCH_ATTENTION_GPU_KERNEL_TABLE_H_
