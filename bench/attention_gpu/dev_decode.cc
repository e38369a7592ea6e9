// bench/attention_gpu/dev_decode.cc — decode rows on tailor's decode kernel
// in the development library (dev_api.h, tad_decode_*): the decode planner
// (src/plan/decode_plan.h) with the CUDA backend's config rules
// (src/backends/cuda/attention/decode_kernels.cc, PlanConfig) restated for
// a library without the runtime, and the launch of decode_kernels.cu's
// variants. No thread-block clusters: the backend takes them only for
// batches of at most one sequence per 8 SMs a KV head.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench/attention_gpu/dev_api.h"
#include "bench/attention_gpu/dev_common.h"
#include "bench/attention_gpu/kernel_table.h"
#include "plan/decode_plan.h"
#include "templates/cuda/attention/decode_params.h"

struct TadDecodePlan {
  tailor::plan::DecodePlan plan;
  int stages = 0;
  int launch_flags = 0;
};

struct TadDecodePrepared {
  tailor::cuda::DecodeKernelParams params;
  const void* kernel = nullptr;
  int workers = 0;
  unsigned shared_bytes = 0;
  int threads = 0;
};

namespace {

namespace tc = ::tailor::cuda;
using tailor::attention_dev::CudaOk;
using tailor::attention_dev::Encode5;
using tailor::attention_dev::Fail;
using tailor::attention_dev::KernelRow;
using tailor::attention_dev::L2PromotionFromEnv;

// The backend's constants (decode_kernels.cc / .h).
constexpr int kItemCostTokens = 128;
constexpr long long kEvictFirstMaxL2s = 4;
constexpr long long kHeadGroupMinTilesPerWorker = 16;
constexpr long long kHeadGroupSplitMinTilesPerWorker = 96;
constexpr long long kNarrowTilesPerWorker = 16;

struct Device {
  int sms = 132;
  int shared_limit = 227 * 1024;
  long long l2_bytes = 50ll << 20;
};

Device QueryDevice() {
  Device d;
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return d;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device) ==
      cudaSuccess) {
    d.sms = value;
  }
  if (cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             device) == cudaSuccess) {
    d.shared_limit = value;
  }
  if (cudaDeviceGetAttribute(&value, cudaDevAttrL2CacheSize, device) ==
      cudaSuccess) {
    d.l2_bytes = value;
  }
  return d;
}

// DecodeStagesFor: the deepest pipeline `ctas_per_sm` CTAs fit.
int StagesFor(int head_dim, int group, int shared_limit, int ctas_per_sm) {
  constexpr int kReserved = 1024;
  const int per_cta =
      ctas_per_sm <= 1 ? shared_limit
                       : (shared_limit + kReserved) / ctas_per_sm - kReserved;
  for (int stages = tc::kDecodeMaxStages; stages >= 2; --stages) {
    if (static_cast<int>(tc::DecodeSharedBytes(head_dim, group, stages)) <=
        per_cta) {
      return stages;
    }
  }
  return 0;
}

long long KvTokens(const int* seq_lens, int batch, int num_kv_heads) {
  long long tokens = 0;
  for (int b = 0; b < batch; ++b) tokens += std::max(seq_lens[b], 0);
  return tokens * num_kv_heads;
}

// PlanConfig without clusters: workers, the cut, the depth, the flags and
// the head group of a plan of `seq_lens`.
tailor::plan::DecodePlanParams ConfigOf(const TadDecodePlanArgs& a,
                                        const int* seq_lens, int batch,
                                        const Device& dev, int* stages,
                                        int* flags) {
  const int group = a.num_qo_heads / a.num_kv_heads;
  const long long tokens = KvTokens(seq_lens, batch, a.num_kv_heads);
  const bool two_fit = StagesFor(a.head_dim, group, dev.shared_limit, 2) >= 2;
  int per_sm = a.workers_per_sm;
  if (per_sm == 0) {
    per_sm =
        static_cast<long long>(batch) * a.num_kv_heads >= dev.sms && two_fit
            ? 2
            : 1;
  }
  const int workers = std::min(dev.sms * per_sm, tc::kDecodeMaxPieces);
  int cut = workers;
  if (a.workers_per_sm == 0 && workers > dev.sms) {
    const long long pairs = static_cast<long long>(batch) * a.num_kv_heads;
    const bool short_work = tokens < static_cast<long long>(workers) *
                                         tc::kDecodeTileTokens *
                                         kNarrowTilesPerWorker;
    if (pairs < dev.sms && short_work) cut = dev.sms;
  }
  *stages = StagesFor(a.head_dim, group, dev.shared_limit, 1);
  if (workers > dev.sms && two_fit) {
    *stages = StagesFor(a.head_dim, group, dev.shared_limit, 2);
  }
  const long long token_bytes = 2ll * a.head_dim * 2;
  *flags = tokens <= kEvictFirstMaxL2s * dev.l2_bytes / token_bytes
               ? tc::kDecodeLaunchEvictFirst
               : 0;
  const bool fits = a.page_size == 16 &&
                    a.num_kv_heads % tc::kDecodeHeadGroup == 0 &&
                    tc::DecodeHeadGroupFits(a.head_dim, group, *stages);
  const long long tiles = tokens / tc::kDecodeTileTokens;
  int head_group = 1;
  if (fits) {
    head_group = a.head_group != 0 ? a.head_group
                 : tiles >= kHeadGroupMinTilesPerWorker * workers
                     ? tc::kDecodeHeadGroup
                     : 1;
  }
  return {.num_kv_heads = a.num_kv_heads,
          .num_workers = workers,
          .tile_tokens = tc::kDecodeTileTokens,
          .page_size = a.page_size,
          .item_cost_tokens = kItemCostTokens,
          .cut_workers = cut,
          .head_group = head_group,
          .head_group_always =
              head_group > 1 &&
              (a.head_group != 0 ||
               tiles >= kHeadGroupSplitMinTilesPerWorker * workers)};
}

const KernelRow* FindDecode(const TadDecodeRunArgs& a) {
  int count = 0;
  const KernelRow* rows = tailor::attention_dev::DecodeKernels(&count);
  for (int i = 0; i < count; ++i) {
    if (rows[i].dtype == a.dtype && rows[i].head_dim == a.head_dim &&
        rows[i].pack == a.group && rows[i].page_size == a.page_size &&
        rows[i].design == a.stages) {
      return &rows[i];
    }
  }
  return nullptr;
}

// The cache maps (decode_params.h): box {64, tokens, D / 64, heads, 1}.
bool EncodeCacheMaps(const TadDecodeRunArgs& a, tc::DecodeKernelParams& p,
                     char* error, int error_len) {
  const auto u = [](long long v) { return static_cast<cuuint64_t>(v); };
  const cuuint64_t dims[5] = {64, u(a.page_size), u(a.head_dim / 64),
                              u(a.num_kv_heads), u(a.num_pages)};
  const cuuint32_t tokens =
      static_cast<cuuint32_t>(std::min(a.page_size, tc::kDecodeTileTokens));
  const cuuint64_t k_strides[4] = {u(a.k_stride_token * 2), 128,
                                   u(a.k_stride_head * 2),
                                   u(a.k_stride_page * 2)};
  const cuuint64_t v_strides[4] = {u(a.v_stride_token * 2), 128,
                                   u(a.v_stride_head * 2),
                                   u(a.v_stride_page * 2)};
  const CUtensorMapL2promotion promotion =
      L2PromotionFromEnv("TAD_DECODE_L2_PROMOTION");
  const cuuint32_t box[5] = {64, tokens,
                             static_cast<cuuint32_t>(a.head_dim / 64), 1, 1};
  if (!Encode5(&p.k_map, a.dtype, a.k_cache, dims, k_strides, box, promotion,
               "k_map", error, error_len) ||
      !Encode5(&p.v_map, a.dtype, a.v_cache, dims, v_strides, box, promotion,
               "v_map", error, error_len)) {
    return false;
  }
  if (!a.head_groups) return true;
  const cuuint32_t heads_box[5] = {64, tokens,
                                   static_cast<cuuint32_t>(a.head_dim / 64),
                                   tc::kDecodeHeadGroup, 1};
  return Encode5(&p.k_heads_map, a.dtype, a.k_cache, dims, k_strides, heads_box,
                 promotion, "k_heads_map", error, error_len) &&
         Encode5(&p.v_heads_map, a.dtype, a.v_cache, dims, v_strides, heads_box,
                 promotion, "v_heads_map", error, error_len);
}

void FillParams(const TadDecodeRunArgs& a, tc::DecodeKernelParams& p) {
  p.q = a.q;
  p.q_stride_b = a.q_stride_b;
  p.q_stride_h = a.q_stride_h;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.k_stride_page = a.k_stride_page;
  p.k_stride_token = a.k_stride_token;
  p.k_stride_head = a.k_stride_head;
  p.v_stride_page = a.v_stride_page;
  p.v_stride_token = a.v_stride_token;
  p.v_stride_head = a.v_stride_head;
  p.block_table = a.block_table;
  p.block_table_stride = a.block_table_stride;
  p.max_pages = a.max_pages;
  p.num_pages = static_cast<int>(a.num_pages);
  p.seq_lens = a.seq_lens;
  p.out = a.out;
  p.out_stride_b = a.out_stride_b;
  p.out_stride_h = a.out_stride_h;
  p.lse = a.lse;
  p.lse_stride_b = a.lse_stride_b;
  p.score_scale = a.sm_scale * 1.4426950408889634f;
  p.cap_scale = 0.0f;
  p.items = static_cast<const tc::DecodeWorkItem*>(a.items);
  p.worker_begin = a.worker_begin;
  p.first_items = static_cast<const tc::DecodeWorkItem*>(a.first_items);
  p.partial_out = a.partial_out;
  p.partial_lse = a.partial_lse;
  p.counters = static_cast<int*>(a.scratch);
  p.errors = reinterpret_cast<unsigned long long*>(
      static_cast<char*>(a.scratch) + tad_decode_error_offset(a.partials));
  p.group = a.group;
  p.page_size = a.page_size;
}

}  // namespace

extern "C" {

int tad_decode_plan_build(const int* seq_lens, int batch,
                          const TadDecodePlanArgs* args, TadDecodePlan** plan,
                          char* error, int error_len) {
  const TadDecodePlanArgs& a = *args;
  if (a.num_kv_heads <= 0 || a.num_qo_heads % a.num_kv_heads != 0) {
    return Fail(error, error_len,
                "num_qo_heads: must be a positive multiple of num_kv_heads");
  }
  auto owned = std::make_unique<TadDecodePlan>();
  const tailor::plan::DecodePlanParams params = ConfigOf(
      a, seq_lens, batch, QueryDevice(), &owned->stages, &owned->launch_flags);
  if (owned->stages < 2) {
    return Fail(error, error_len, "head_dim / group: no depth fits");
  }
  const absl::Status status = tailor::plan::BuildDecodePlan(
      absl::MakeConstSpan(seq_lens, batch), params, &owned->plan);
  if (!status.ok()) {
    return Fail(error, error_len, std::string(status.message()));
  }
  if (owned->plan.params().head_group > 1) {
    owned->launch_flags |= tc::kDecodeLaunchHeadGroups;
  }
  *plan = owned.release();
  return 0;
}

int tad_decode_plan_info(const TadDecodePlan* plan, TadDecodePlanInfo* info) {
  const tailor::plan::DecodePlan& p = plan->plan;
  const tailor::plan::DecodePlanStats s = p.stats();
  *info = {};
  info->items = s.items;
  info->workers = p.params().num_workers;
  info->partials = p.num_partials();
  info->stages = plan->stages;
  info->head_group = p.params().head_group;
  info->launch_flags = plan->launch_flags;
  info->busy_workers = s.busy_workers;
  info->split_pairs = s.split_pairs;
  info->item_bytes = sizeof(tailor::plan::DecodeWorkItem);
  info->max_worker_cost = s.max_worker_cost;
  info->mean_worker_cost = s.mean_worker_cost;
  return 0;
}

int tad_decode_plan_copy(const TadDecodePlan* plan, void* items,
                         void* first_items, int* worker_begin) {
  static_assert(sizeof(tailor::plan::DecodeWorkItem) ==
                sizeof(tc::DecodeWorkItem));
  const tailor::plan::DecodePlan& p = plan->plan;
  std::memcpy(items, p.items().data(),
              p.items().size() * sizeof(tailor::plan::DecodeWorkItem));
  std::memcpy(first_items, p.first_items().data(),
              p.first_items().size() * sizeof(tailor::plan::DecodeWorkItem));
  std::memcpy(worker_begin, p.worker_begin().data(),
              p.worker_begin().size() * sizeof(int));
  worker_begin[p.worker_begin().size()] = plan->launch_flags;
  return 0;
}

void tad_decode_plan_free(TadDecodePlan* plan) { delete plan; }

int tad_decode_prepare(const TadDecodeRunArgs* args,
                       TadDecodePrepared** prepared, char* error,
                       int error_len) {
  const TadDecodeRunArgs& a = *args;
  const KernelRow* row = FindDecode(a);
  if (row == nullptr) {
    return Fail(error, error_len,
                "no decode kernel for group " + std::to_string(a.group) +
                    " stages " + std::to_string(a.stages) +
                    " (bf16, D 128, pages of 16 only)");
  }
  if (a.num_pages < 1 || a.num_workers < 1) {
    return Fail(error, error_len, "num_pages, num_workers: must be positive");
  }
  auto prep = std::make_unique<TadDecodePrepared>();
  prep->params = {};
  if (!EncodeCacheMaps(a, prep->params, error, error_len)) return 1;
  FillParams(a, prep->params);
  prep->kernel = row->function;
  prep->workers = a.num_workers;
  prep->shared_bytes = row->shared_bytes;
  prep->threads = row->threads;
  if (!CudaOk(cudaFuncSetAttribute(row->function,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(prep->shared_bytes)),
              "cudaFuncSetAttribute", error, error_len)) {
    return 1;
  }
  *prepared = prep.release();
  return 0;
}

int tad_decode_launch(const TadDecodePrepared* prep, void* stream, char* error,
                      int error_len) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(prep->workers);
  config.blockDim = dim3(prep->threads);
  config.dynamicSmemBytes = prep->shared_bytes;
  config.stream = static_cast<cudaStream_t>(stream);
  void* args[] = {const_cast<tc::DecodeKernelParams*>(&prep->params)};
  return CudaOk(cudaLaunchKernelExC(&config, prep->kernel, args),
                "decode launch", error, error_len)
             ? 0
             : 1;
}

void tad_decode_prepared_free(TadDecodePrepared* prepared) { delete prepared; }

long long tad_decode_scratch_bytes(int partials) {
  return tc::DecodeScratchBytes(partials);
}

long long tad_decode_error_offset(int partials) {
  return tc::DecodeScratchBytes(partials) - tc::kDecodeErrorWords * 8;
}

}  // extern "C"
