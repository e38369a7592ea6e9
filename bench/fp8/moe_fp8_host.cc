// bench/fp8/moe_fp8_host.cc — the GPU harness's launcher for the FP8 MoE
// kernels: loads the cubin that nvrtc_cubin built from moe_fp8_kernels.cu,
// encodes the TMA maps, fills the params structs the templates define, and
// launches on the caller's stream. A C ABI for ctypes (moe_fp8_bench.py);
// libcuda is opened with dlopen, so the library links nothing of CUDA and
// shares the process's primary context with torch.
//
// Every pointer is a device address the caller allocated (torch tensors);
// the caller keeps them alive while a prepared GEMM is in use.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "backends/cuda/moe/heuristics.h"  // MoeSm90Ctas
#include "templates/cuda/moe/fp8_params.h"

namespace {

using tailor::cuda::MoeFp8GemmSm90Params;
using tailor::cuda::MoeFp8PackParams;

struct Driver {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void**,
                           void**);
  CUresult (*TensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType,
                                   cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle,
                                   CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);
  CUresult (*GetErrorString)(CUresult, const char**);
};

Driver g_driver;
CUmodule g_module = nullptr;
int g_sms = 0;
std::string g_error;

bool Fail(const std::string& what) {
  g_error = what;
  return false;
}

bool Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* text = "unknown";
  if (g_driver.GetErrorString != nullptr) g_driver.GetErrorString(r, &text);
  return Fail(std::string(what) + ": " + text);
}

template <typename F>
bool Resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr || Fail(std::string("libcuda has no ") + name);
}

bool LoadDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) return Fail("dlopen libcuda.so.1 failed");
  Driver& d = g_driver;
  return Resolve(lib, "cuInit", d.Init) &&
         Resolve(lib, "cuDeviceGet", d.DeviceGet) &&
         Resolve(lib, "cuDeviceGetAttribute", d.DeviceGetAttribute) &&
         Resolve(lib, "cuDevicePrimaryCtxRetain", d.PrimaryCtxRetain) &&
         Resolve(lib, "cuCtxSetCurrent", d.CtxSetCurrent) &&
         Resolve(lib, "cuModuleLoadData", d.ModuleLoadData) &&
         Resolve(lib, "cuModuleGetFunction", d.ModuleGetFunction) &&
         Resolve(lib, "cuFuncSetAttribute", d.FuncSetAttribute) &&
         Resolve(lib, "cuLaunchKernel", d.LaunchKernel) &&
         Resolve(lib, "cuTensorMapEncodeTiled", d.TensorMapEncodeTiled) &&
         Resolve(lib, "cuGetErrorString", d.GetErrorString);
}

// A 2D map {inner, outer} over `base` with rows of `row_bytes`.
bool Encode2d(tailor::cuda::TensorMap* out, CUtensorMapDataType type,
              const void* base, unsigned long long inner,
              unsigned long long outer, unsigned long long row_bytes,
              unsigned box_inner, unsigned box_outer, bool swizzle) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t element_strides[2] = {1, 1};
  if (!Check(g_driver.TensorMapEncodeTiled(
                 &map, type, 2, const_cast<void*>(base), dims, strides, box,
                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 swizzle ? CU_TENSOR_MAP_SWIZZLE_128B
                         : CU_TENSOR_MAP_SWIZZLE_NONE,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled")) {
    return false;
  }
  static_assert(sizeof(map) == sizeof(*out), "TensorMap is a CUtensorMap");
  std::memcpy(out, &map, sizeof(map));
  return true;
}

// One prepared GEMM: its kernel, launch shape and params.
struct Gemm {
  CUfunction function;
  unsigned grid;
  unsigned shared_bytes;
  MoeFp8GemmSm90Params params;
};

}  // namespace

extern "C" {

const char* fp8dev_error() { return g_error.c_str(); }
int fp8dev_sm_count() { return g_sms; }

// Loads the cubin at `path` in the current device's primary context.
int fp8dev_init(const char* path) {
  if (!LoadDriver()) return 1;
  CUdevice device;
  CUcontext context;
  if (!Check(g_driver.Init(0), "cuInit") ||
      !Check(g_driver.DeviceGet(&device, 0), "cuDeviceGet") ||
      !Check(g_driver.PrimaryCtxRetain(&context, device), "retain") ||
      !Check(g_driver.CtxSetCurrent(context), "cuCtxSetCurrent") ||
      !Check(g_driver.DeviceGetAttribute(
                 &g_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
             "sm count")) {
    return 1;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string image = bytes.str();
  if (image.empty()) return Fail(std::string("cannot read ") + path), 1;
  return Check(g_driver.ModuleLoadData(&g_module, image.data()),
               "cuModuleLoadData")
             ? 0
             : 1;
}

// The quantizing Pack (tailor_fp8_pack) over `rows` rows.
int fp8dev_pack(const void* hidden, const int* permutation, void* a,
                float* a_scales, int rows, int tokens, int topk, int hidden_dim,
                int scale_rows, void* stream) {
  if (rows == 0) return 0;
  CUfunction f;
  if (!Check(g_driver.ModuleGetFunction(&f, g_module, "tailor_fp8_pack"),
             "tailor_fp8_pack")) {
    return 1;
  }
  MoeFp8PackParams p = {.hidden = hidden,
                        .permutation = permutation,
                        .a = a,
                        .a_scales = a_scales,
                        .static_scale = nullptr,
                        .rows = rows,
                        .tokens = tokens,
                        .topk = topk,
                        .hidden_dim = hidden_dim,
                        .scale_rows = scale_rows,
                        .rows_in_order = 0};
  const int groups = hidden_dim / tailor::cuda::kMoeFp8Block;
  const unsigned grid_y =
      (groups + tailor::cuda::kMoeFp8PackGroupsPerBlock - 1) /
      tailor::cuda::kMoeFp8PackGroupsPerBlock;
  void* args[] = {&p};
  return Check(g_driver.LaunchKernel(
                   f, rows, grid_y, 1, tailor::cuda::kMoeFp8PackThreads, 1, 1,
                   0, static_cast<CUstream>(stream), args, nullptr),
               "launch pack")
             ? 0
             : 1;
}

// Prepares a GEMM of kernel `name` (tailor_fp8_gemm_<tile>_<epilogue>):
//   a [a_rows, k] e4m3, a_scales [k / 128, scale_rows] f32,
//   w [experts, n, k] e4m3, w_scales [experts, n / 128, k / 128] f32,
//   c [rows, out] (bf16 or e4m3), c_scales [out / 128, c_scale_rows],
//   work [max_work] items, header (MoeRouteHeader, num_work set),
//   partials / arrivals: split-K scratch (null: no split-K).
// max_tiles bounds the launch's plan tiles (its grid); a_rows_box is the
// A box's rows (MoeSm90ARows of the kernel's tile).
void* fp8dev_gemm_prepare(const char* name, const void* a,
                          const float* a_scales, long long a_rows,
                          long long scale_rows, const void* w,
                          const float* w_scales, int experts, int n, int k,
                          void* c, float* c_scales, int c_scale_rows,
                          const void* work, void* header, int max_work,
                          int max_tiles, int a_rows_box, int swap_ab,
                          float* partials, int* arrivals,
                          int dynamic_schedule, int expert_groups) {
  using namespace tailor::cuda;
  auto* g = new Gemm();
  const auto drop = [g]() -> void* {
    delete g;
    return nullptr;
  };
  if (!Check(g_driver.ModuleGetFunction(&g->function, g_module, name), name)) {
    return drop();
  }
  g->shared_bytes = MoeFp8SharedBytes(a_rows_box);
  if (!Check(g_driver.FuncSetAttribute(
                 g->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                 static_cast<int>(g->shared_bytes)),
             "shared memory attribute")) {
    return drop();
  }
  const bool split_k = partials != nullptr;
  g->grid = MoeSm90Ctas(max_tiles, k, g_sms, split_k, swap_ab != 0);
  if (g->grid < 1) g->grid = 1;
  MoeFp8GemmSm90Params& p = g->params;
  const unsigned long long kb = k / kMoeFp8Block;
  if (!Encode2d(&p.a_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, k, a_rows, k,
                kMoeFp8Block, a_rows_box, true) ||
      !Encode2d(&p.w_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, w, k,
                static_cast<unsigned long long>(experts) * n, k, kMoeFp8Block,
                kMoeSm90BoxRows, true) ||
      !Encode2d(&p.a_scale_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a_scales,
                scale_rows, kb, scale_rows * 4,
                MoeFp8ScaleBoxRows(a_rows_box), 1, false)) {
    return drop();
  }
  p.w_scales = w_scales;
  p.c = c;
  p.c_scales = c_scales;
  p.c_scale_rows = c_scale_rows;
  p.work = static_cast<const MoeWorkItem*>(work);
  p.header = static_cast<MoeRouteHeader*>(header);
  p.n = n;
  p.k = k;
  p.dynamic_schedule = dynamic_schedule;
  p.expert_groups = expert_groups;
  p.split_k = split_k ? 1 : 0;
  p.partials = partials;
  p.split_arrivals = arrivals;
  p.max_work = max_work;
  return g;
}

int fp8dev_gemm_grid(void* gemm) { return static_cast<Gemm*>(gemm)->grid; }

int fp8dev_gemm_launch(void* gemm, void* stream) {
  Gemm* g = static_cast<Gemm*>(gemm);
  void* args[] = {&g->params};
  return Check(g_driver.LaunchKernel(g->function, g->grid, 1, 1,
                                     tailor::cuda::kMoeSm90Threads, 1, 1,
                                     g->shared_bytes,
                                     static_cast<CUstream>(stream), args,
                                     nullptr),
               "launch gemm")
             ? 0
             : 1;
}

void fp8dev_gemm_free(void* gemm) { delete static_cast<Gemm*>(gemm); }

}  // extern "C"
