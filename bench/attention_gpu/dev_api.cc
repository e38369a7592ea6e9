// bench/attention_gpu/dev_api.cc — the host side of the ragged-attention
// development library (dev_api.h): plans with src/plan/attention_plan.h,
// encodes the four tensor maps of templates/cuda/attention/prefill_params.h
// and launches the kernels of kernels.cu through the CUDA runtime.
#include "bench/attention_gpu/dev_api.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/attention_gpu/dev_common.h"
#include "bench/attention_gpu/kernel_table.h"
#include "plan/attention_plan.h"
#include "templates/cuda/attention/prefill_params.h"

struct TadPlan {
  tailor::plan::AttentionPlan plan;
};

struct TadPrepared {
  tailor::cuda::PrefillParams params;
  tailor::cuda::PrefillMergeParams merge;
  const void* kernel = nullptr;
  const void* merge_kernel = nullptr;
  int workers = 0;
  int merge_grid = 0;
  unsigned shared_bytes = 0;
  int threads = 0;
};

namespace tailor::attention_dev {

int Fail(char* error, int error_len, const std::string& message) {
  if (error != nullptr && error_len > 0) {
    std::snprintf(error, error_len, "%s", message.c_str());
  }
  return 1;
}

bool CudaOk(cudaError_t e, const char* what, char* error, int error_len) {
  if (e == cudaSuccess) return true;
  Fail(error, error_len,
       std::string(what) + ": " + cudaGetErrorName(e) + " " +
           cudaGetErrorString(e));
  return false;
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t,
                                 void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);

EncodeTiled Encoder() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                         cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A rank-5, 128-byte swizzled map of 16-bit elements; strides in bytes of
// dims 1..4.
bool Encode5(tailor::cuda::TensorMap* map, int dtype, const void* base,
             const cuuint64_t (&dims)[5], const cuuint64_t (&strides)[4],
             const cuuint32_t (&box)[5], CUtensorMapL2promotion promotion,
             const char* what, char* error, int error_len) {
  EncodeTiled encode = Encoder();
  if (encode == nullptr) {
    Fail(error, error_len, "cuTensorMapEncodeTiled: no driver entry point");
    return false;
  }
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMap encoded;
  const CUresult r =
      encode(&encoded,
             dtype == 0 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             5, const_cast<void*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    char buf[512];
    std::snprintf(
        buf, sizeof(buf),
        "%s: cuTensorMapEncodeTiled failed (%d): dims {%llu %llu "
        "%llu %llu %llu} strides {%llu %llu %llu %llu} box {%u %u "
        "%u %u %u}",
        what, static_cast<int>(r), (unsigned long long)dims[0],
        (unsigned long long)dims[1], (unsigned long long)dims[2],
        (unsigned long long)dims[3], (unsigned long long)dims[4],
        (unsigned long long)strides[0], (unsigned long long)strides[1],
        (unsigned long long)strides[2], (unsigned long long)strides[3], box[0],
        box[1], box[2], box[3], box[4]);
    Fail(error, error_len, buf);
    return false;
  }
  static_assert(sizeof(encoded) == sizeof(*map));
  std::memcpy(map, &encoded, sizeof(*map));
  return true;
}

CUtensorMapL2promotion L2PromotionFromEnv(const char* variable) {
  const char* v = std::getenv(variable);
  const std::string s = v == nullptr ? "none" : v;
  if (s == "none") return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  if (s == "64") return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  if (s == "128") return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

}  // namespace tailor::attention_dev

namespace {

using tailor::attention_dev::CudaOk;
using tailor::attention_dev::Encode5;
using tailor::attention_dev::Fail;
using tailor::attention_dev::KernelRow;
using tailor::attention_dev::L2PromotionFromEnv;

const KernelRow* FindPrefill(const TadRunArgs& a) {
  int count = 0;
  const KernelRow* rows =
      a.design == tailor::attention_dev::kDesignLegacy
          ? tailor::attention_dev::LegacyPrefillKernels(&count)
          : tailor::attention_dev::PrefillKernels(&count);
  for (int i = 0; i < count; ++i) {
    if (rows[i].dtype == a.dtype && rows[i].head_dim == a.head_dim &&
        rows[i].pack == a.pack && rows[i].page_size == a.page_size &&
        rows[i].design == a.design) {
      return &rows[i];
    }
  }
  return nullptr;
}

const KernelRow* FindMerge(const TadRunArgs& a) {
  int count = 0;
  const KernelRow* rows = tailor::attention_dev::MergeKernels(&count);
  for (int i = 0; i < count; ++i) {
    if (rows[i].dtype == a.dtype && rows[i].head_dim == a.head_dim) {
      return &rows[i];
    }
  }
  return nullptr;
}

bool Aligned16(const void* p) {
  return reinterpret_cast<unsigned long long>(p) % 16 == 0;
}

// The rules the maps and 16-byte loads need; a message naming the first
// broken one, or empty.
std::string CheckRunArgs(const TadRunArgs& a) {
  const long long strides[] = {
      a.q_stride_token,   a.q_stride_head,  a.k_stride_page,  a.k_stride_token,
      a.k_stride_head,    a.v_stride_page,  a.v_stride_token, a.v_stride_head,
      a.out_stride_token, a.out_stride_head};
  const char* names[] = {"q_stride_token", "q_stride_head", "k_stride_page",
                         "k_stride_token", "k_stride_head", "v_stride_page",
                         "v_stride_token", "v_stride_head", "out_stride_token",
                         "out_stride_head"};
  for (int i = 0; i < 10; ++i) {
    if (strides[i] <= 0 || strides[i] % 8 != 0) {
      return std::string(names[i]) +
             ": must be a positive multiple of 8 "
             "elements (16 bytes), got " +
             std::to_string(strides[i]);
    }
  }
  if (!Aligned16(a.q) || !Aligned16(a.k_cache) || !Aligned16(a.v_cache) ||
      !Aligned16(a.out)) {
    return "q, k_cache, v_cache, out: must be 16-byte aligned";
  }
  if (a.num_qo_heads <= 0 || a.num_kv_heads <= 0 ||
      a.num_qo_heads % a.num_kv_heads != 0) {
    return "num_qo_heads: must be a positive multiple of num_kv_heads";
  }
  const int group = a.num_qo_heads / a.num_kv_heads;
  if (a.pack <= 0 || group % a.pack != 0) {
    return "pack: must divide the group " + std::to_string(group);
  }
  if (a.q_tokens < 1 || a.num_pages < 1 || a.max_pages < 1) {
    return "q_tokens, num_pages, max_pages: must be positive";
  }
  if (a.num_workers < 1) return "num_workers: must be positive";
  return "";
}

bool EncodeMaps(const TadRunArgs& a, tailor::cuda::PrefillParams& p,
                char* error, int error_len) {
  const auto u = [](long long v) { return static_cast<cuuint64_t>(v); };
  const cuuint64_t chunks = a.head_dim / 64;
  const cuuint64_t q_dims[5] = {64, u(a.pack), u(a.num_qo_heads / a.pack),
                                u(a.q_tokens), chunks};
  const cuuint64_t q_strides[4] = {u(a.q_stride_head * 2),
                                   u(a.q_stride_head * 2 * a.pack),
                                   u(a.q_stride_token * 2), 128};
  const cuuint32_t q_box[5] = {64, static_cast<cuuint32_t>(a.pack), 1,
                               static_cast<cuuint32_t>(128 / a.pack), 1};
  if (!Encode5(&p.q_map, a.dtype, a.q, q_dims, q_strides, q_box,
               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "q_map", error, error_len)) {
    return false;
  }
  const cuuint64_t out_strides[4] = {u(a.out_stride_head * 2),
                                     u(a.out_stride_head * 2 * a.pack),
                                     u(a.out_stride_token * 2), 128};
  const cuuint32_t out_box[5] = {64, static_cast<cuuint32_t>(a.pack), 1,
                                 static_cast<cuuint32_t>(64 / a.pack), 1};
  if (!Encode5(&p.out_map, a.dtype, a.out, q_dims, out_strides, out_box,
               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "out_map", error,
               error_len)) {
    return false;
  }
  const int block = tailor::cuda::PrefillSm90ShapeFor(a.head_dim).kv_block;
  const cuuint32_t box_tokens =
      static_cast<cuuint32_t>(a.page_size < block ? a.page_size : block);
  const cuuint64_t kv_dims[5] = {64, u(a.page_size), chunks, u(a.num_kv_heads),
                                 u(a.num_pages)};
  const cuuint32_t kv_box[5] = {64, box_tokens, 1, 1, 1};
  const cuuint64_t k_strides[4] = {u(a.k_stride_token * 2), 128,
                                   u(a.k_stride_head * 2),
                                   u(a.k_stride_page * 2)};
  const cuuint64_t v_strides[4] = {u(a.v_stride_token * 2), 128,
                                   u(a.v_stride_head * 2),
                                   u(a.v_stride_page * 2)};
  const CUtensorMapL2promotion promotion =
      L2PromotionFromEnv("TAD_PREFILL_L2_PROMOTION");
  return Encode5(&p.k_map, a.dtype, a.k_cache, kv_dims, k_strides, kv_box,
                 promotion, "k_map", error, error_len) &&
         Encode5(&p.v_map, a.dtype, a.v_cache, kv_dims, v_strides, kv_box,
                 promotion, "v_map", error, error_len);
}

void FillParams(const TadRunArgs& a, TadPrepared& prep) {
  tailor::cuda::PrefillParams& p = prep.params;
  p.v_cache = a.v_cache;
  p.v_stride_page = a.v_stride_page;
  p.v_stride_token = a.v_stride_token;
  p.v_stride_head = a.v_stride_head;
  p.out = a.out;
  p.out_stride_token = a.out_stride_token;
  p.out_stride_head = a.out_stride_head;
  p.lse = a.lse;
  p.lse_stride_token = a.lse_stride_token;
  p.block_table = a.block_table;
  p.block_table_stride = a.block_table_stride;
  p.max_pages = a.max_pages;
  p.num_pages = static_cast<int>(a.num_pages);
  p.items = static_cast<const tailor::cuda::PrefillWorkItem*>(a.items);
  p.worker_begin = a.worker_begin;
  p.partial_out = a.partial_out;
  p.partial_lse = a.partial_lse;
  p.errors = a.errors;
  p.kv_lens = nullptr;  // no device KV lengths: only the bad-page word
  constexpr float kLog2e = 1.4426950408889634f;
  if (a.soft_cap > 0.0f) {
    p.score_scale = a.soft_cap * kLog2e;
    p.cap_scale = a.sm_scale / a.soft_cap;
  } else {
    p.score_scale = a.sm_scale * kLog2e;
    p.cap_scale = 0.0f;
  }
  p.causal = a.causal;
  p.window_left = a.window_left;
  p.group = a.num_qo_heads / a.num_kv_heads;
  tailor::cuda::PrefillMergeParams& m = prep.merge;
  m.groups =
      static_cast<const tailor::cuda::PrefillMergeGroup*>(a.merge_groups);
  m.num_groups = a.merge_count;
  m.partial_out = a.partial_out;
  m.partial_lse = a.partial_lse;
  m.out = a.out;
  m.out_stride_token = a.out_stride_token;
  m.out_stride_head = a.out_stride_head;
  m.lse = a.lse;
  m.lse_stride_token = a.lse_stride_token;
  m.pack = a.pack;
}

}  // namespace

extern "C" {

int tad_plan_build(const int* q_lens, const int* kv_lens, int batch,
                   const TadPlanArgs* args, TadPlan** plan, char* error,
                   int error_len) {
  namespace plan_ns = tailor::plan;
  if (args->head_dim != 64 && args->head_dim != 128 && args->head_dim != 256) {
    return Fail(error, error_len, "head_dim: must be 64, 128 or 256");
  }
  const int block = tailor::cuda::PrefillSm90ShapeFor(args->head_dim).kv_block;
  plan_ns::AttentionPlanParams params = {
      .num_qo_heads = args->num_qo_heads,
      .num_kv_heads = args->num_kv_heads,
      .head_pack = args->pack,
      .tile_rows = tailor::cuda::kPrefillTileRows,
      .kv_block = block,
      .num_workers = args->num_workers > 0 ? args->num_workers : tad_sm_count(),
      .causal = args->causal != 0,
      .window_left = args->window_left,
      .item_cost = block,
      .masked_block_extra = block / 4};
  if (args->max_pieces > 0) params.max_pieces = args->max_pieces;
  if (args->min_piece_blocks > 0) {
    params.min_piece_blocks = args->min_piece_blocks;
  }
  auto owned = std::make_unique<TadPlan>();
  const absl::Status status = plan_ns::BuildAttentionPlan(
      absl::MakeConstSpan(q_lens, batch), absl::MakeConstSpan(kv_lens, batch),
      params, &owned->plan);
  if (!status.ok())
    return Fail(error, error_len, std::string(status.message()));
  *plan = owned.release();
  return 0;
}

int tad_plan_info(const TadPlan* plan, TadPlanInfo* info) {
  const auto& p = plan->plan;
  const auto& s = p.stats();
  *info = {};
  info->items = static_cast<int>(p.items().size());
  info->workers = p.params().num_workers;
  info->merge_groups = static_cast<int>(p.merge_groups().size());
  info->partials = p.num_partials();
  info->tiles = s.tiles;
  info->tail_tiles = s.tail_tiles;
  info->masked_tiles = s.masked_tiles;
  info->split_tiles = s.split_tiles;
  info->busy_workers = s.busy_workers;
  info->kv_block = p.params().kv_block;
  info->tile_rows = p.params().tile_rows;
  info->item_bytes = sizeof(tailor::plan::AttentionWorkItem);
  info->merge_bytes = sizeof(tailor::plan::AttentionMergeGroup);
  info->total_q = p.total_q();
  info->blocks = s.blocks;
  info->masked_blocks = s.masked_blocks;
  info->useful_rows = s.useful_rows;
  info->executed_rows = s.executed_rows;
  info->max_worker_cost = s.max_worker_cost;
  info->mean_worker_cost = s.mean_worker_cost;
  return 0;
}

int tad_plan_copy(const TadPlan* plan, void* items, int* worker_begin,
                  void* merge_groups) {
  static_assert(sizeof(tailor::plan::AttentionWorkItem) ==
                sizeof(tailor::cuda::PrefillWorkItem));
  static_assert(sizeof(tailor::plan::AttentionMergeGroup) ==
                sizeof(tailor::cuda::PrefillMergeGroup));
  const auto& p = plan->plan;
  std::memcpy(items, p.items().data(),
              p.items().size() * sizeof(tailor::plan::AttentionWorkItem));
  std::memcpy(worker_begin, p.worker_begin().data(),
              p.worker_begin().size() * sizeof(int));
  if (merge_groups != nullptr) {
    std::memcpy(
        merge_groups, p.merge_groups().data(),
        p.merge_groups().size() * sizeof(tailor::plan::AttentionMergeGroup));
  }
  return 0;
}

void tad_plan_free(TadPlan* plan) { delete plan; }

int tad_prepare(const TadRunArgs* args, TadPrepared** prepared, char* error,
                int error_len) {
  const TadRunArgs& a = *args;
  if (const std::string bad = CheckRunArgs(a); !bad.empty()) {
    return Fail(error, error_len, bad);
  }
  const KernelRow* row = FindPrefill(a);
  if (row == nullptr) {
    return Fail(error, error_len,
                "no compiled variant for dtype " + std::to_string(a.dtype) +
                    " head_dim " + std::to_string(a.head_dim) + " pack " +
                    std::to_string(a.pack) + " page_size " +
                    std::to_string(a.page_size) + " design " +
                    std::to_string(a.design) + " (see tad_variants)");
  }
  auto prep = std::make_unique<TadPrepared>();
  prep->params = {};
  if (!EncodeMaps(a, prep->params, error, error_len)) return 1;
  FillParams(a, *prep);
  prep->kernel = row->function;
  prep->threads = row->threads;
  prep->workers = a.num_workers;
  prep->shared_bytes = row->shared_bytes;
  if (!CudaOk(cudaFuncSetAttribute(row->function,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(prep->shared_bytes)),
              "cudaFuncSetAttribute", error, error_len)) {
    return 1;
  }
  if (a.merge_grid > 0) {
    const KernelRow* merge = FindMerge(a);
    if (merge == nullptr) {
      return Fail(error, error_len,
                  "no merge kernel for this dtype / head_dim");
    }
    prep->merge_kernel = merge->function;
    prep->merge_grid = a.merge_grid;
  }
  *prepared = prep.release();
  return 0;
}

int tad_launch(const TadPrepared* prep, void* stream, char* error,
               int error_len) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(prep->workers);
  config.blockDim = dim3(prep->threads);
  config.dynamicSmemBytes = prep->shared_bytes;
  config.stream = static_cast<cudaStream_t>(stream);
  void* args[] = {const_cast<tailor::cuda::PrefillParams*>(&prep->params)};
  if (!CudaOk(cudaLaunchKernelExC(&config, prep->kernel, args),
              "prefill launch", error, error_len)) {
    return 1;
  }
  if (prep->merge_kernel != nullptr) {
    cudaLaunchConfig_t merge = {};
    merge.gridDim = dim3(prep->merge_grid);
    merge.blockDim = dim3(128);
    merge.stream = static_cast<cudaStream_t>(stream);
    void* merge_args[] = {
        const_cast<tailor::cuda::PrefillMergeParams*>(&prep->merge)};
    if (!CudaOk(cudaLaunchKernelExC(&merge, prep->merge_kernel, merge_args),
                "merge launch", error, error_len)) {
      return 1;
    }
  }
  return 0;
}

void tad_prepared_free(TadPrepared* prepared) { delete prepared; }

int tad_sm_count(void) {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess) {
    return 132;
  }
  return count;
}

}  // extern "C"

namespace {

const char* DesignSuffix(int design) {
  switch (design) {
    case tailor::attention_dev::kDesignLegacy:
      return " legacy";
    default:
      return "";
  }
}

}  // namespace

extern "C" {

const char* tad_variants(void) {
  static const std::string text = [] {
    std::string s;
    for (const auto list : {tailor::attention_dev::PrefillKernels,
                            tailor::attention_dev::LegacyPrefillKernels}) {
      int count = 0;
      const KernelRow* rows = list(&count);
      for (int i = 0; i < count; ++i) {
        s += std::string(rows[i].dtype == 0 ? "bf16" : "f16") + " " +
             std::to_string(rows[i].head_dim) + " " +
             std::to_string(rows[i].pack) + " " +
             std::to_string(rows[i].page_size) + DesignSuffix(rows[i].design) +
             "\n";
      }
    }
    return s;
  }();
  return text.c_str();
}

int tad_pipeline_checks(void) {
#if TAILOR_PIPELINE_CHECKS
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
