#include "backends/cuda/attention/decode_kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/heuristics.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/driver_api.h"
#include "backends/cuda/tma/tensor_map_check.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "backends/gpu/attention_launch.h"
#include "backends/gpu/error_words.h"
#include "core/logging.h"
#include "ops/attention/decode_spec.h"
#include "tailor/status.h"
#include "templates/cuda/attention/decode_params.h"

namespace tailor::cuda {
namespace {

using tailor::internal::DecodeErrors;
using tailor::internal::DecodeKernel;
using tailor::internal::DecodeLaunch;
using tailor::internal::DecodePlanConfig;
using tailor::internal::DecodeShape;
using tailor::internal::DecodeSpec;
using tailor::internal::Engine;
using tailor::internal::Kernel;
using tailor::internal::KernelJob;
using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::LaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

// The decode.stages and decode.head_group values (tuning.cc) are the
// templates' choices.
static_assert(kDecodeTuningMaxStages == kDecodeMaxStages);
static_assert(kDecodeTuningHeadGroup == kDecodeHeadGroup);

// The kernels read the uploaded plan items as their own DecodeWorkItem.
static_assert(sizeof(DecodeWorkItem) == sizeof(tailor::plan::DecodeWorkItem));
static_assert(offsetof(DecodeWorkItem, seq) ==
              offsetof(tailor::plan::DecodeWorkItem, seq));
static_assert(offsetof(DecodeWorkItem, kv_head) ==
              offsetof(tailor::plan::DecodeWorkItem, kv_head));
static_assert(offsetof(DecodeWorkItem, kv_begin) ==
              offsetof(tailor::plan::DecodeWorkItem, kv_begin));
static_assert(offsetof(DecodeWorkItem, kv_end) ==
              offsetof(tailor::plan::DecodeWorkItem, kv_end));
static_assert(offsetof(DecodeWorkItem, seq_len) ==
              offsetof(tailor::plan::DecodeWorkItem, seq_len));
static_assert(offsetof(DecodeWorkItem, partial) ==
              offsetof(tailor::plan::DecodeWorkItem, partial));
static_assert(offsetof(DecodeWorkItem, first_partial) ==
              offsetof(tailor::plan::DecodeWorkItem, first_partial));
static_assert(offsetof(DecodeWorkItem, pieces) ==
              offsetof(tailor::plan::DecodeWorkItem, pieces));

constexpr float kLog2e = 1.4426950408889634f;

absl::Status InvalidKey(absl::string_view field, absl::string_view rule,
                        int64_t got) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", rule, ", got ", got));
}

static_assert(static_cast<unsigned>(DecodeKernel::kPortable) ==
              kDecodeVariantCpAsync);
static_assert(static_cast<unsigned>(DecodeKernel::kTma) == kDecodeVariantTma);

// The spec of a CUDA decode key, checked against what the templates build.
absl::StatusOr<DecodeSpec> DecodeSpecOf(const SpecKey& key) {
  if (key.op != OpKind::kAttentionDecode) {
    return absl::UnimplementedError(
        absl::StrCat("cuda decode kernels: no generator for ",
                     std::string(GetOpInfo(key.op).name)));
  }
  TAILOR_ASSIGN_OR_RETURN(const DecodeSpec spec, DecodeSpec::FromKey(key));
  if (spec.dtype != DType::kBF16 && spec.dtype != DType::kF16) {
    return InvalidKey("dtypes[0]", "must be bf16 or f16",
                      static_cast<int>(spec.dtype));
  }
  const int64_t d = spec.head_dim, group = spec.group, page = spec.page_size;
  if (d != 64 && d != 128 && d != 256) {
    return InvalidKey("dims[0] (D)", "must be 64, 128 or 256", d);
  }
  if (group < 1 || group > 16) {
    return InvalidKey("dims[1] (group)", "must be in [1, 16]", group);
  }
  if (page < 1 || page > 256) {
    return InvalidKey("dims[2] (page)", "must be in [1, 256]", page);
  }
  if (spec.stages < 2 || spec.stages > kDecodeMaxStages) {
    return InvalidKey("tile.stages",
                      absl::StrCat("must be in [2, ", kDecodeMaxStages, "]"),
                      spec.stages);
  }
  if (spec.tile_tokens != kDecodeTileTokens) {
    return InvalidKey("tile.m (tile_tokens)",
                      absl::StrCat("must be ", kDecodeTileTokens),
                      spec.tile_tokens);
  }
  if (spec.warps != kDecodeConsumerWarps) {
    return InvalidKey("tile.warps",
                      absl::StrCat("must be ", kDecodeConsumerWarps),
                      spec.warps);
  }
  if (spec.kernel == DecodeKernel::kTma && !DecodeTmaPageSize(page)) {
    return InvalidKey("dims[2] (page)",
                      "must be a multiple of 8 that divides 64 or is a "
                      "multiple of 64 for the TMA variant",
                      page);
  }
  return spec;
}

absl::Status MakeCurrent(const CudaBackend& backend) {
  return backend.device_context().MakeCurrent();
}

CUdeviceptr DevicePointer(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

unsigned long long* ErrorWords(void* scratch, int64_t max_partials) {
  return reinterpret_cast<unsigned long long*>(
      static_cast<char*>(scratch) + DecodeScratchBytes(max_partials) -
      kDecodeErrorWords * 8);
}

DecodeKernelParams ParamsOf(const DecodeLaunch& l, int64_t max_partials) {
  DecodeKernelParams p = {};
  p.q = l.q;
  p.q_stride_b = l.q_stride_b;
  p.q_stride_h = l.q_stride_h;
  p.q_rows = l.q_rows;
  gpu::CopyPagedCaches(l, p);
  p.page_indptr = l.page_indptr;
  p.seq_lens = l.seq_lens;
  p.out = l.out;
  p.out_stride_b = l.out_stride_b;
  p.out_stride_h = l.out_stride_h;
  p.lse = l.lse;
  p.lse_stride_b = l.lse_stride_b;
  if (l.soft_cap > 0) {
    p.score_scale = l.soft_cap * kLog2e;
    p.cap_scale = l.sm_scale / l.soft_cap;
  } else {
    p.score_scale = l.sm_scale * kLog2e;
    p.cap_scale = 0;
  }
  p.items = reinterpret_cast<const DecodeWorkItem*>(l.work.items);
  p.worker_begin = l.work.worker_begin;
  p.first_items = reinterpret_cast<const DecodeWorkItem*>(l.work.first_items);
  p.partial_out = l.work.partial_out;
  p.partial_lse = l.work.partial_lse;
  p.counters = static_cast<int*>(l.work.scratch);
  p.errors = ErrorWords(l.work.scratch, max_partials);
  p.group = static_cast<int>(l.shape.group);
  p.page_size = static_cast<int>(l.shape.page_size);
  return p;
}

// The generic kernel of `shape`'s dtype and head dim (64, 128 or 256).
GenericKernelId GenericDecodeId(const DecodeShape& shape) {
  const int by_dim = shape.head_dim == 64 ? 0 : shape.head_dim == 128 ? 1 : 2;
  const int by_dtype = shape.dtype == DType::kBF16 ? 0 : 3;
  return static_cast<GenericKernelId>(
      static_cast<int>(GenericKernelId::kDecodeBf16D64) + by_dtype + by_dim);
}

}  // namespace

TensorMapSpec DecodeCacheMapSpec(const DecodeShape& s, int64_t num_pages,
                                 const void* cache, const int64_t (&strides)[3],
                                 int box_heads) {
  constexpr uint64_t kBytes = 2;
  const uint32_t box_tokens =
      static_cast<uint32_t>(std::min<int64_t>(s.page_size, kDecodeTileTokens));
  TensorMapSpec spec;
  spec.data_type = s.dtype == DType::kBF16 ? TensorMapDataType::kBfloat16
                                           : TensorMapDataType::kFloat16;
  spec.rank = 5;
  spec.global_address = reinterpret_cast<uint64_t>(cache);
  spec.global_dims = {64, static_cast<uint64_t>(s.page_size),
                      static_cast<uint64_t>(s.head_dim / 64),
                      static_cast<uint64_t>(s.num_kv_heads),
                      static_cast<uint64_t>(num_pages)};
  spec.global_strides = {static_cast<uint64_t>(strides[1]) * kBytes, 128,
                         static_cast<uint64_t>(strides[2]) * kBytes,
                         static_cast<uint64_t>(strides[0]) * kBytes};
  spec.box_dims = {64, box_tokens, static_cast<uint32_t>(s.head_dim / 64),
                   static_cast<uint32_t>(box_heads), 1};
  spec.swizzle = TensorMapSwizzle::k128B;
  // No promotion: a box row is 128 bytes at a token stride of Hkv x D x 2,
  // so a wider L2 fetch brings sectors no CTA reads; the L2, not DRAM, is
  // the busy unit of a large decode step ("Decode cache maps: L2
  // promotion", bench/results/decode_design.txt).
  spec.l2_promotion = TensorMapL2Promotion::kNone;
  return spec;
}

bool DecodeTmaPageSize(int64_t page_size) {
  return page_size >= 8 && page_size <= 256 && page_size % 8 == 0 &&
         (kDecodeTileTokens % page_size == 0 ||
          page_size % kDecodeTileTokens == 0);
}

bool DecodeHeadGroupsFit(const DecodeShape& shape, int stages,
                         absl::string_view arch) {
  return arch == "sm_90a" && shape.page_size == 16 &&
         shape.num_kv_heads % kDecodeHeadGroup == 0 &&
         DecodeHeadGroupFits(static_cast<int>(shape.head_dim),
                             static_cast<int>(shape.group), stages);
}

SpecKey CudaDecodeKey(const Engine& engine, const DecodeShape& shape,
                      uint32_t variant, int32_t stages) {
  return CudaDecodeKey(engine.target(), shape, variant, stages);
}

SpecKey CudaDecodeKey(const KeyTarget& target, const DecodeShape& shape,
                      uint32_t variant, int32_t stages) {
  return DecodeSpec{.dtype = shape.dtype,
                    .head_dim = shape.head_dim,
                    .group = shape.group,
                    .page_size = shape.page_size,
                    .tile_tokens = kDecodeTileTokens,
                    .warps = kDecodeConsumerWarps,
                    .stages = stages,
                    .kernel = static_cast<DecodeKernel>(variant)}
      .ToKey(target);
}

int64_t SharedLimitOfArch(absl::string_view arch) {
  // cudaDevAttrMaxSharedMemoryPerBlockOptin of each generation.
  if (arch == "sm_80" || arch == "sm_87") return 163 * 1024;
  if (arch == "sm_86" || arch == "sm_89" || absl::StartsWith(arch, "sm_12")) {
    return 99 * 1024;
  }
  if (absl::StartsWith(arch, "sm_90") || absl::StartsWith(arch, "sm_10")) {
    return 227 * 1024;
  }
  return 0;
}

absl::StatusOr<std::vector<KernelJob>> DecodeLayerKernels(
    const KeyTarget& target, const DecodeShape& shape,
    const DecodeTuning& tuning) {
  const int64_t shared_limit = SharedLimitOfArch(target.arch);
  if (shared_limit == 0) {
    return absl::UnimplementedError(
        absl::StrCat("arch: no shared-memory size known for \"", target.arch,
                     "\" (sm_80, sm_86, sm_87, sm_89, sm_90[a], sm_10x, "
                     "sm_12x)"));
  }
  const int stages = DecodeStagesFor(shape.head_dim, shape.group, shared_limit);
  if (stages == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "head_dim ", shape.head_dim, " x group ", shape.group,
        ": two pipeline stages do not fit ", target.arch, "'s shared memory"));
  }
  // One CTA an SM, and two where two fit (which batch buckets use two
  // depends on the device's SM count, unknown here); decode.stages caps
  // both, as StagesFor does.
  auto capped = [&tuning](int depth) {
    return tuning.stages != 0 ? std::min(depth, tuning.stages) : depth;
  };
  std::vector<int> depths = {capped(stages)};
  const int two =
      capped(DecodeStagesFor(shape.head_dim, shape.group, shared_limit, 2));
  if (two >= 2 && two != depths[0]) depths.push_back(two);
  std::vector<KernelJob> jobs;
  for (int depth : depths) {
    jobs.push_back({CudaDecodeKey(target, shape, kDecodeVariantCpAsync, depth),
                    &GenerateCudaDecode});
    if (target.arch == "sm_90a" && DecodeTmaPageSize(shape.page_size)) {
      jobs.push_back({CudaDecodeKey(target, shape, kDecodeVariantTma, depth),
                      &GenerateCudaDecode});
    }
  }
  for (const KernelJob& job : jobs) {
    TAILOR_RETURN_IF_ERROR(DecodeSpecOf(job.key).status());
  }
  return jobs;
}

absl::StatusOr<KernelSource> GenerateCudaDecode(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const DecodeSpec spec, DecodeSpecOf(key));
  const bool tma = spec.kernel == DecodeKernel::kTma;
  const std::string kernel = absl::StrCat(
      "tailor::cuda::", tma ? "DecodeSm90Kernel" : "DecodeSm80Kernel",
      "<tailor::cuda::Half16::", spec.dtype == DType::kBF16 ? "kBf16" : "kF16",
      ", ", spec.head_dim, ", ", spec.group, ", ", spec.page_size, ", ",
      spec.stages, ">");
  const std::string entry =
      tma ? "tailor_decode_tma" : "tailor_decode_cp_async";
  return KernelSource{
      .code = absl::StrCat(
          "#include \"templates/cuda/",
          tma ? "attention/decode_sm90.cuh" : "attention/decode_sm80.cuh",
          "\"\nTAILOR_CUDA_ENTRY(", entry, ", (", kernel, "))\n"),
      .entry = entry};
}

absl::StatusOr<int> CudaDecodeStagesFor(const DecodeShape& shape,
                                        int64_t workers,
                                        const CudaDecodeDevice& device,
                                        const DecodeTuning& tuning) {
  const int stages = DecodeLaunchStages(shape.head_dim, shape.group, workers,
                                        device.multiprocessors,
                                        device.shared_limit, tuning.stages);
  if (stages == 0) {
    return absl::UnimplementedError(
        absl::StrCat("attention.decode: head_dim ", shape.head_dim,
                     " with group ", shape.group, " needs ",
                     DecodeSharedBytes(static_cast<int>(shape.head_dim),
                                       static_cast<int>(shape.group), 2),
                     " bytes of shared memory per CTA; ", device.arch,
                     " allows ", device.shared_limit));
  }
  return stages;
}

namespace {

// Whether heads group in a plan of `seq_lens` on `config`'s workers, and
// whether those groups may split (DecodePlanConfig's head_group fields).
void SetHeadGroup(const DecodeShape& shape, absl::Span<const int32_t> seq_lens,
                  int stages, const CudaDecodeDevice& device, int forced,
                  DecodePlanConfig& config) {
  config.head_group = DecodeHeadGroupFor(
      shape, seq_lens, config.num_workers,
      DecodeHeadGroupsFit(shape, stages, device.arch), forced);
  // Forced (tests, decode.head_group=4): grouped whatever it costs;
  // long enough streams: grouped, split or not.
  config.head_group_always =
      config.head_group > 1 &&
      (forced != 0 ||
       DecodeHeadGroupsSplit(shape, seq_lens, config.num_workers));
}

}  // namespace

absl::StatusOr<DecodePlanConfig> CudaDecodePlanConfig(
    const DecodeShape& shape, int64_t bucket,
    absl::Span<const int32_t> seq_lens, const CudaDecodeDevice& device,
    const DecodeTuning& tuning,
    absl::FunctionRef<DecodeClusterCapacity()> cluster_capacity) {
  TAILOR_RETURN_IF_ERROR(
      CudaDecodeStagesFor(shape, 0, device, tuning).status());
  const int sms = device.multiprocessors;
  const int64_t shared = device.shared_limit;
  // At most kDecodeMaxPieces workers (the bound on the pieces of a pair; 2
  // per SM reach it at 144 SMs).
  auto workers = [sms](int per_sm) {
    return std::min(sms * per_sm, kDecodeMaxPieces);
  };
  DecodePlanConfig config{.tile_tokens = kDecodeTileTokens,
                          .item_cost_tokens = kDecodeItemCostTokens};
  if (tuning.workers_per_sm != 0) {
    config.num_workers = workers(tuning.workers_per_sm);
  } else {
    config.num_workers = workers(DecodeCtasPerSm(shape, bucket, sms, shared));
    config.cut_workers =
        DecodeCutWorkers(shape, seq_lens, config.num_workers, sms);
  }
  TAILOR_ASSIGN_OR_RETURN(
      const int stages,
      CudaDecodeStagesFor(shape, config.num_workers, device, tuning));
  config.launch_flags =
      DecodeKvTokens(shape, seq_lens) <=
              DecodeEvictFirstMaxTokens(shape, device.l2_bytes)
          ? kDecodeLaunchEvictFirst
          : 0;
  config.head_group_flags = kDecodeLaunchHeadGroups;
  const int forced = tuning.head_group;
  // Small buckets: one CTA an SM in clusters, no head groups (those pay
  // over long streams a worker, never at these batches), unless head groups
  // are forced. Only a bucket whose pairs could fit the clusters (at most
  // one of 8 CTAs an 8 SMs) asks for the capacity, which compiles a kernel
  // the first time.
  const bool tma =
      device.arch == "sm_90a" && DecodeTmaPageSize(shape.page_size);
  const bool may_cluster = tuning.workers_per_sm == 0 && tuning.cluster != 1 &&
                           forced != kDecodeHeadGroup && tma &&
                           bucket * shape.num_kv_heads * 8 <= sms;
  const DecodeClusterCapacity capacity =
      may_cluster ? cluster_capacity() : DecodeClusterCapacity{};
  const int cluster = DecodeClusterWorkersFor(shape, bucket, tma, stages,
                                              shared, capacity, tuning.cluster);
  if (cluster > 0) {
    const int count = cluster == 16 ? capacity.of16 : capacity.of8;
    config.num_workers = cluster * count;
    config.cut_workers = 0;
    config.cluster_workers = cluster;
    config.cluster_flags = kDecodeLaunchClusterMerges;
    return config;
  }
  SetHeadGroup(shape, seq_lens, stages, device, forced, config);
  return config;
}

// ---- CudaDecodeKernels ------------------------------------------------------

absl::Status CudaDecodeKernels::QueryDevice() {
  if (multiprocessors_.load() > 0) return absl::OkStatus();
  TAILOR_RETURN_IF_ERROR(MakeCurrent(backend_));
  const DriverApi& api = backend_.device_context().api();
  int sms = 0, shared = 0, l2 = 0;
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                               backend_.device_context().device()),
      "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)"));
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                               backend_.device_context().device()),
      "cuDeviceGetAttribute(L2_CACHE_SIZE)"));
  l2_bytes_.store(l2);
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuDeviceGetAttribute(
          &shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
          backend_.device_context().device()),
      "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)"));
  shared_limit_.store(shared);
  multiprocessors_.store(sms);
  return absl::OkStatus();
}

DecodeClusterCapacity CudaDecodeKernels::ClusterCapacity() {
  std::call_once(cluster_query_, [this] {
    cluster_capacity_ = QueryClusterCapacity(shared_limit_.load());
  });
  return cluster_capacity_;
}

DecodeClusterCapacity CudaDecodeKernels::QueryClusterCapacity(
    int shared_limit) {
  DecodeClusterCapacity capacity;
  if (backend_.compute_capability() < 90) return capacity;
  const absl::StatusOr<std::vector<int>> counts = backend_.MaxActiveClusters(
      {8, 16}, (kDecodeConsumerWarps + 1) * 32, shared_limit);
  if (!counts.ok()) {
    tailor::internal::Logger().warn(
        "attention.decode: no cluster launches ({})",
        counts.status().message());
    return capacity;
  }
  capacity.of8 = (*counts)[0];
  capacity.of16 = (*counts)[1];
  return capacity;
}

CudaDecodeDevice CudaDecodeKernels::Device() const {
  return {.arch = backend_.arch(),
          .multiprocessors = multiprocessors_.load(),
          .shared_limit = shared_limit_.load(),
          .l2_bytes = l2_bytes_.load()};
}

absl::StatusOr<int> CudaDecodeKernels::StagesFor(const DecodeShape& shape,
                                                 int64_t workers) {
  TAILOR_RETURN_IF_ERROR(QueryDevice());
  return CudaDecodeStagesFor(shape, workers, Device(), tuning_);
}

absl::StatusOr<DecodePlanConfig> CudaDecodeKernels::PlanConfig(
    const DecodeShape& shape, int64_t bucket,
    absl::Span<const int32_t> seq_lens) {
  TAILOR_RETURN_IF_ERROR(QueryDevice());
  DecodeTuning tuning = tuning_;
  if (forced_head_group_.load() != 0) {
    tuning.head_group = forced_head_group_.load();
  }
  return CudaDecodePlanConfig(shape, bucket, seq_lens, Device(), tuning,
                              [this] { return ClusterCapacity(); });
}

int64_t CudaDecodeKernels::ScratchBytes(int64_t max_partials) const {
  return DecodeScratchBytes(max_partials);
}

absl::Status CudaDecodeKernels::InitScratch(Engine&, void* scratch,
                                            int64_t max_partials,
                                            void* stream) {
  TAILOR_RETURN_IF_ERROR(MakeCurrent(backend_));
  const DriverApi& api = backend_.device_context().api();
  CUstream s = static_cast<CUstream>(stream);
  if (max_partials > 0) {
    TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
        api.cuMemsetD8Async(DevicePointer(scratch), 0, 4 * max_partials, s),
        "cuMemsetD8Async(decode counters)"));
  }
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuMemsetD8Async(DevicePointer(ErrorWords(scratch, max_partials)),
                          0xff, kDecodeErrorWords * 8, s),
      "cuMemsetD8Async(decode errors)"));
  // ReserveDecodeWorkspace passes no stream: finish the fills on the legacy
  // stream, so that a non-blocking caller stream never sees them pending.
  if (s != nullptr) return absl::OkStatus();
  return CudaResultToStatus(api.cuStreamSynchronize(nullptr),
                            "cuStreamSynchronize");
}

absl::Status CudaDecodeKernels::UploadPlan(Engine&, const void* host,
                                           void* device, size_t bytes,
                                           void* stream) {
  if (bytes == 0) return absl::OkStatus();
  TAILOR_RETURN_IF_ERROR(MakeCurrent(backend_));
  return CudaResultToStatus(
      backend_.device_context().api().cuMemcpyHtoDAsync(
          DevicePointer(device), host, bytes, static_cast<CUstream>(stream)),
      "cuMemcpyHtoDAsync(decode plan)");
}

absl::StatusOr<DecodeErrors> CudaDecodeKernels::TakeErrors(Engine& engine,
                                                           void* scratch,
                                                           int64_t max_partials,
                                                           void* stream) {
  TAILOR_RETURN_IF_ERROR(MakeCurrent(backend_));
  const DriverApi& api = backend_.device_context().api();
  CUstream s = static_cast<CUstream>(stream);
  unsigned long long words[kDecodeErrorWords];
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuMemcpyDtoHAsync(words,
                            DevicePointer(ErrorWords(scratch, max_partials)),
                            sizeof(words), s),
      "cuMemcpyDtoHAsync(decode errors)"));
  TAILOR_RETURN_IF_ERROR(
      CudaResultToStatus(api.cuStreamSynchronize(s), "cuStreamSynchronize"));
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuMemsetD8Async(DevicePointer(ErrorWords(scratch, max_partials)),
                          0xff, sizeof(words), s),
      "cuMemsetD8Async(decode errors)"));
  DecodeErrors errors;
  auto decode = gpu::DecodeErrorWordAs<DecodeErrors::Bad>;
  errors.bad_page = decode(words[kDecodeErrorBadPage]);
  errors.bad_seq_len = decode(words[kDecodeErrorBadSeqLen]);
  errors.too_many_pages = decode(words[kDecodeErrorTooManyPages]);
  return errors;
}

absl::Status CudaDecodeKernels::Decode(Engine& engine,
                                       const DecodeLaunch& launch) {
  const DecodeShape& shape = launch.shape;
  TAILOR_ASSIGN_OR_RETURN(int stages,
                          StagesFor(shape, launch.work.num_workers));
  DecodeKernelParams params = ParamsOf(launch, launch.work.max_partials);
  // ---- the path: TMA where legal, cp.async otherwise -----------------------
  const Path forced = forced_.load();
  absl::Status tma_status = absl::OkStatus();
  if (backend_.arch() != "sm_90a") {
    tma_status = absl::FailedPreconditionError(absl::StrCat(
        "the TMA decode kernel needs sm_90a, device is ", backend_.arch()));
  } else if (!DecodeTmaPageSize(shape.page_size)) {
    tma_status = absl::FailedPreconditionError(absl::StrCat(
        "the TMA decode kernel needs a page size that is a multiple of 8 and "
        "divides 64 or is a multiple of 64, got ",
        shape.page_size));
  } else if (launch.num_pages < 1) {
    tma_status = absl::FailedPreconditionError("the caches have no pages");
  } else {
    // The head groups' maps whenever a plan of this shape may use them: a
    // captured graph keeps these params for every plan it replays.
    const int box_heads = DecodeHeadGroupsFit(shape, stages, backend_.arch())
                              ? kDecodeHeadGroup
                              : 0;
    for (const auto& [map, cache, strides, heads] :
         {std::tuple{&params.k_map, launch.k_cache, &launch.k_strides, 1},
          std::tuple{&params.v_map, launch.v_cache, &launch.v_strides, 1},
          std::tuple{&params.k_heads_map, launch.k_cache, &launch.k_strides,
                     box_heads},
          std::tuple{&params.v_heads_map, launch.v_cache, &launch.v_strides,
                     box_heads}}) {
      if (heads == 0) continue;
      const TensorMapSpec spec =
          DecodeCacheMapSpec(shape, launch.num_pages, cache, *strides, heads);
      tma_status = CheckTensorMap(spec, backend_.compute_capability());
      if (!tma_status.ok()) break;
      absl::StatusOr<TensorMapBytes> bytes =
          backend_.descriptor_pool().GetOrEncode(spec);
      if (!bytes.ok()) {
        tma_status = bytes.status();
        break;
      }
      std::memcpy(map, bytes->bytes, sizeof(TensorMap));
    }
  }
  bool tma = tma_status.ok() && forced != Path::kCpAsync;
  if (forced == Path::kTma && !tma) {
    return absl::FailedPreconditionError(
        absl::StrCat("attention.decode: TMA path forced but not legal: ",
                     tma_status.message()));
  }
  last_.store(tma ? Path::kTma : Path::kCpAsync);
  // ---- the kernel and its launch --------------------------------------------
  const SpecKey key = CudaDecodeKey(
      engine, shape, tma ? kDecodeVariantTma : kDecodeVariantCpAsync, stages);
  const tailor::internal::KernelGeneratorFn generate =
      engine.GeneratorFor(key.op, &GenerateCudaDecode);
  TAILOR_ASSIGN_OR_RETURN(SelectedKernel selected,
                          backend_.generic_kernels().Select(
                              engine, key, generate, GenericDecodeId(shape)));
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.work.num_workers);
  config.stream = launch.stream;
  if (selected.generic) {  // cp.async, kGenericDecodeStages deep
    config.block.x = kDecodeConsumerWarps * 32;
    config.shared_bytes =
        DecodeSharedBytes(static_cast<int>(shape.head_dim),
                          static_cast<int>(shape.group), kGenericDecodeStages);
    return engine.LaunchFallback(key.op, *selected.kernel, config, &params,
                                 sizeof(params));
  }
  config.block.x = (kDecodeConsumerWarps + (tma ? 1 : 0)) * 32;
  config.shared_bytes = DecodeSharedBytes(
      static_cast<int>(shape.head_dim), static_cast<int>(shape.group), stages);
  // The plan's clusters (the TMA kernel merges in them; any other runs the
  // same plan without, merging through L2).
  const int cluster = launch.work.cluster_workers;
  if (tma && cluster > 1) {
    config.cluster.x = static_cast<uint32_t>(cluster);
    config.shared_bytes = DecodeClusterSharedBytes(
        static_cast<int>(shape.head_dim), static_cast<int>(shape.group), stages,
        cluster);
  }
  return engine.Launch(key.op, *selected.kernel, config, params);
}

}  // namespace tailor::cuda
