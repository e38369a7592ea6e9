#include "backends/cuda/attention/ragged_kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/driver_api.h"
#include "backends/cuda/generic_kernels.h"
#include "backends/cuda/tma/tensor_map_check.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "backends/gpu/attention_launch.h"
#include "backends/gpu/error_words.h"
#include "core/env.h"
#include "ops/attention/ragged_spec.h"
#include "tailor/status.h"
#include "templates/cuda/attention/prefill_params.h"

namespace tailor::cuda {
namespace {

using tailor::internal::Engine;
using tailor::internal::KernelJob;
using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::LaunchConfig;
using tailor::internal::RaggedErrors;
using tailor::internal::RaggedKernelSpec;
using tailor::internal::RaggedLaunch;
using tailor::internal::RaggedMergeSpec;
using tailor::internal::RaggedPlanConfig;
using tailor::internal::RaggedShape;
using tailor::internal::SpecKey;

// The kernels read the plan's items and merge groups as their own.
static_assert(sizeof(PrefillWorkItem) ==
              sizeof(tailor::plan::AttentionWorkItem));
static_assert(offsetof(PrefillWorkItem, q_token) ==
              offsetof(tailor::plan::AttentionWorkItem, q_token));
static_assert(offsetof(PrefillWorkItem, kv_end) ==
              offsetof(tailor::plan::AttentionWorkItem, kv_end));
static_assert(offsetof(PrefillWorkItem, partial) ==
              offsetof(tailor::plan::AttentionWorkItem, partial));
static_assert(offsetof(PrefillWorkItem, merge) ==
              offsetof(tailor::plan::AttentionWorkItem, merge));
static_assert(sizeof(PrefillMergeGroup) ==
              sizeof(tailor::plan::AttentionMergeGroup));
static_assert(offsetof(PrefillMergeGroup, first_partial) ==
              offsetof(tailor::plan::AttentionMergeGroup, first_partial));

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPrefillThreads = 384;  // PrefillSm90Kernel::kThreads
constexpr int kMergeThreads = 128;    // PrefillMergeKernel::kThreads

CUdeviceptr DevicePointer(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

int32_t HeadPackOf(int64_t group) {
  int32_t pack = 1;
  while (pack < 16 && group % (pack * 2) == 0) pack *= 2;
  return pack;
}

TensorMapDataType DataTypeOf(DType dtype) {
  return dtype == DType::kBF16 ? TensorMapDataType::kBfloat16
                               : TensorMapDataType::kFloat16;
}

// q or out as prefill_params.h's rank-5 packed-row view: dims {64, pack,
// Hq / pack, tokens, D / 64}; `box_rows` packed rows per box.
TensorMapSpec RowsMapSpec(const RaggedLaunch& l, const void* data,
                          int64_t stride_token, int64_t stride_head,
                          int64_t tokens, int pack, int box_rows) {
  const uint64_t kBytes = 2;
  TensorMapSpec spec;
  spec.data_type = DataTypeOf(l.shape.dtype);
  spec.rank = 5;
  spec.global_address = reinterpret_cast<uint64_t>(data);
  spec.global_dims = {64, static_cast<uint64_t>(pack),
                      static_cast<uint64_t>(l.shape.num_qo_heads / pack),
                      static_cast<uint64_t>(tokens),
                      static_cast<uint64_t>(l.shape.head_dim / 64)};
  spec.global_strides = {static_cast<uint64_t>(stride_head) * kBytes,
                         static_cast<uint64_t>(stride_head * pack) * kBytes,
                         static_cast<uint64_t>(stride_token) * kBytes, 128};
  spec.box_dims = {64, static_cast<uint32_t>(pack), 1,
                   static_cast<uint32_t>(box_rows / pack), 1};
  spec.swizzle = TensorMapSwizzle::k128B;
  spec.l2_promotion = TensorMapL2Promotion::k128B;
  return spec;
}

// A cache as dims {64, page_size, D / 64, Hkv, num_pages}, boxes of one
// chunk of min(page, KV block) tokens of one head.
TensorMapSpec CacheMapSpec(const RaggedLaunch& l, const void* cache,
                           const int64_t (&strides)[3]) {
  const uint64_t kBytes = 2;
  const int64_t block = PrefillSm90ShapeFor(l.shape.head_dim).kv_block;
  TensorMapSpec spec;
  spec.data_type = DataTypeOf(l.shape.dtype);
  spec.rank = 5;
  spec.global_address = reinterpret_cast<uint64_t>(cache);
  spec.global_dims = {64, static_cast<uint64_t>(l.shape.page_size),
                      static_cast<uint64_t>(l.shape.head_dim / 64),
                      static_cast<uint64_t>(l.shape.num_kv_heads),
                      static_cast<uint64_t>(l.num_pages)};
  spec.global_strides = {static_cast<uint64_t>(strides[1]) * kBytes, 128,
                         static_cast<uint64_t>(strides[2]) * kBytes,
                         static_cast<uint64_t>(strides[0]) * kBytes};
  spec.box_dims = {
      64, static_cast<uint32_t>(std::min(l.shape.page_size, block)), 1, 1, 1};
  spec.swizzle = TensorMapSwizzle::k128B;
  // No promotion, as the decode maps: a box row is 128 bytes at the token
  // stride ("Prefill cache maps: L2 promotion",
  // bench/results/attention_prefill_h200.txt).
  spec.l2_promotion = TensorMapL2Promotion::kNone;
  return spec;
}

}  // namespace

bool RaggedTmaPageSize(int64_t page_size, int64_t head_dim) {
  const int64_t block =
      PrefillSm90ShapeFor(static_cast<int>(head_dim)).kv_block;
  return page_size >= 8 && page_size <= 256 && page_size % 8 == 0 &&
         (block % page_size == 0 || page_size % block == 0);
}

namespace {

const char* HalfName(DType dtype) {
  return dtype == DType::kBF16 ? "tailor::cuda::Half16::kBf16"
                               : "tailor::cuda::Half16::kF16";
}

// The merge of either kernel's pieces: partial slots of its tile rows.
// The source of one explicit instantiation: `defines`, then the attention
// template `header`, then `kernel` as the entry `entry`.
KernelSource InstanceSource(absl::string_view header, absl::string_view kernel,
                            absl::string_view entry,
                            absl::string_view defines = "") {
  return KernelSource{
      .code =
          absl::StrCat(defines, "#include \"templates/cuda/attention/", header,
                       "\"\nTAILOR_CUDA_ENTRY(", entry, ", (", kernel, "))\n"),
      .entry = std::string(entry)};
}

absl::StatusOr<KernelSource> MergeSource(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(RaggedMergeSpec spec, RaggedMergeSpec::FromKey(key));
  if (spec.tile_rows != kPrefillTileRows &&
      spec.tile_rows != kPrefillSm80TileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("key.tile.m (tile rows): the merge reads slots of ",
                     kPrefillTileRows, " (sm_90a) or ", kPrefillSm80TileRows,
                     " (portable) rows, got ", spec.tile_rows));
  }
  // The sm_90a merge's source predates the tile-rows parameter (its
  // default): unchanged, it keeps its cache entries.
  const std::string rows = spec.tile_rows == kPrefillTileRows
                               ? ""
                               : absl::StrCat(", ", spec.tile_rows);
  const std::string kernel =
      absl::StrCat("tailor::cuda::PrefillMergeKernel<", HalfName(spec.dtype),
                   ", ", spec.head_dim, rows, ">");
  return InstanceSource("prefill_merge.cuh", kernel, "tailor_ragged_merge");
}

absl::StatusOr<KernelSource> PortableSource(const RaggedKernelSpec& spec) {
  if (spec.tile_rows != kPrefillSm80TileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("key.tile.m (tile rows): the portable kernel tiles by ",
                     kPrefillSm80TileRows, ", got ", spec.tile_rows));
  }
  if (spec.pipeline_checks) {
    return absl::InvalidArgumentError(
        "key.variant: the portable kernel has no pipeline checks (bit 0)");
  }
  const std::string kernel = absl::StrCat(
      "tailor::cuda::PrefillSm80Kernel<", HalfName(spec.dtype), ", ",
      spec.head_dim, ", ", spec.head_pack, ", ", spec.page_size, ">");
  return InstanceSource("prefill_sm80.cuh", kernel, "tailor_ragged");
}

absl::StatusOr<KernelSource> HopperSource(const RaggedKernelSpec& spec) {
  if (!RaggedTmaPageSize(spec.page_size, spec.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key.dims[3] (page): the sm_90a kernel needs a multiple of 8 that "
        "divides the KV block or is a multiple of it, got ",
        spec.page_size));
  }
  if (spec.tile_rows != kPrefillTileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("key.tile.m (tile rows): the sm_90a kernel tiles by ",
                     kPrefillTileRows, ", got ", spec.tile_rows));
  }
  const std::string checks =
      spec.pipeline_checks ? "#define TAILOR_PIPELINE_CHECKS 1\n" : "";
  const std::string kernel = absl::StrCat(
      "tailor::cuda::PrefillSm90Kernel<", HalfName(spec.dtype), ", ",
      spec.head_dim, ", ", spec.head_pack, ", ", spec.page_size, ">");
  return InstanceSource("prefill_sm90.cuh", kernel, "tailor_ragged", checks);
}

}  // namespace

absl::StatusOr<KernelSource> GenerateCudaRagged(const SpecKey& key) {
  if (key.op == tailor::internal::OpKind::kAttentionRaggedMerge) {
    return MergeSource(key);
  }
  TAILOR_ASSIGN_OR_RETURN(RaggedKernelSpec spec,
                          RaggedKernelSpec::FromKey(key));
  return spec.portable ? PortableSource(spec) : HopperSource(spec);
}

absl::StatusOr<int> CudaRaggedKernels::Multiprocessors() {
  if (int sms = multiprocessors_.load(); sms > 0) return sms;
  TAILOR_RETURN_IF_ERROR(backend_.device_context().MakeCurrent());
  int sms = 0;
  TAILOR_RETURN_IF_ERROR(
      CudaResultToStatus(backend_.device_context().api().cuDeviceGetAttribute(
                             &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                             backend_.device_context().device()),
                         "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)"));
  multiprocessors_.store(sms);
  return sms;
}

namespace {

// The serving rule of ragged_kernels.h: the portable kernel serves pages of
// 1..256 on sm_80 and newer; the sm_90a kernel takes over its TMA pages.
absl::Status CheckPageSize(const RaggedShape& shape) {
  if (shape.page_size >= 1 && shape.page_size <= 256) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("page_size: the CUDA ragged kernels serve pages of 1 to "
                   "256 tokens, got ",
                   shape.page_size));
}

// The compute capability of an arch name "sm_XY[a]" (XY), or 0.
int CapabilityOfArch(absl::string_view arch) {
  if (!absl::ConsumePrefix(&arch, "sm_")) return 0;
  absl::ConsumeSuffix(&arch, "a");
  int capability = 0;
  return absl::SimpleAtoi(arch, &capability) ? capability : 0;
}

absl::Status CheckArch(absl::string_view arch, absl::string_view what) {
  if (CapabilityOfArch(arch) >= 80) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("attention.ragged: the CUDA kernels need sm_80 or newer, ",
                   what, " is ", arch));
}

// What of a plan's configuration the kernel keys depend on (not the device).
RaggedPlanConfig KeyConfigOf(const RaggedShape& shape, bool portable) {
  const int head_dim = static_cast<int>(shape.head_dim);
  const int32_t block = portable ? PrefillSm80ShapeFor(head_dim).kv_block
                                 : PrefillSm90ShapeFor(head_dim).kv_block;
  return RaggedPlanConfig{
      .head_pack = HeadPackOf(shape.group()),
      .tile_rows = portable ? kPrefillSm80TileRows : kPrefillTileRows,
      .kv_block = block,
      .item_cost = block,
      .masked_block_extra = block / 4,
      .min_piece_blocks = 4,
      .max_pieces = 16};
}

// CTAs of the portable kernel an SM: two where its shared memory is small
// enough for two on an A100 or a Hopper (elsewhere the second runs as a
// later wave: any count is correct).
int PortableCtasPerSm(int64_t head_dim) { return head_dim <= 128 ? 2 : 1; }

bool PipelineChecksAsked() {
  return tailor::internal::EnvIs("TAILOR_CUDA_PIPELINE_CHECKS", "1");
}

// The kernel spec of a layer; the pipeline checks exist in the sm_90a
// kernel only.
RaggedKernelSpec KernelSpecOf(const RaggedShape& shape,
                              const RaggedPlanConfig& config, bool portable,
                              bool pipeline_checks) {
  RaggedKernelSpec spec = tailor::internal::RaggedKernelSpecFor(shape, config);
  spec.portable = portable;
  spec.pipeline_checks = pipeline_checks && !portable;
  return spec;
}

}  // namespace

bool RaggedUsesPortable(absl::string_view arch, const RaggedShape& shape,
                        bool portable_forced) {
  return portable_forced || arch != "sm_90a" ||
         !RaggedTmaPageSize(shape.page_size, shape.head_dim);
}

CudaRaggedKernels::CudaRaggedKernels(CudaBackend& backend, bool enabled,
                                     bool decode_rows, bool portable_forced)
    : backend_(backend),
      enabled_(enabled),
      decode_rows_(decode_rows),
      portable_forced_(portable_forced),
      pipeline_checks_(PipelineChecksAsked()) {}

RaggedPlanConfig CudaRaggedPlanConfig(const RaggedShape& shape,
                                      int multiprocessors, bool decode_rows,
                                      bool portable) {
  RaggedPlanConfig config = KeyConfigOf(shape, portable);
  config.num_workers = portable
                           ? multiprocessors * PortableCtasPerSm(shape.head_dim)
                           : multiprocessors;
  // The decode kernel attends a sequence's whole KV: no window.
  config.decode_rows = decode_rows && shape.window_left < 0;
  return config;
}

absl::StatusOr<std::vector<KernelJob>> RaggedLayerKernels(
    const KeyTarget& target, const RaggedShape& shape, bool portable_forced) {
  TAILOR_RETURN_IF_ERROR(CheckArch(target.arch, "target"));
  TAILOR_RETURN_IF_ERROR(CheckPageSize(shape));
  const bool portable = RaggedUsesPortable(target.arch, shape, portable_forced);
  const RaggedPlanConfig config = KeyConfigOf(shape, portable);
  return std::vector<KernelJob>{
      {KernelSpecOf(shape, config, portable, PipelineChecksAsked()).Key(target),
       &GenerateCudaRagged},
      {tailor::internal::RaggedMergeSpecFor(shape, config).Key(target),
       &GenerateCudaRagged}};
}

absl::StatusOr<RaggedPlanConfig> CudaRaggedKernels::PlanConfig(
    const RaggedShape& shape) {
  if (!enabled_) {
    return absl::UnimplementedError(
        "attention.ragged: the CUDA kernel is off (tuning key "
        "ragged.cuda=off)");
  }
  TAILOR_RETURN_IF_ERROR(CheckArch(backend_.arch(), "device"));
  TAILOR_RETURN_IF_ERROR(CheckPageSize(shape));
  TAILOR_ASSIGN_OR_RETURN(int sms, Multiprocessors());
  return CudaRaggedPlanConfig(
      shape, sms, decode_rows_,
      RaggedUsesPortable(backend_.arch(), shape, portable_forced_));
}

int64_t CudaRaggedKernels::ScratchBytes() const {
  return kPrefillErrorWords * 8;
}

absl::Status CudaRaggedKernels::InitScratch(Engine&, void* scratch,
                                            void* stream) {
  TAILOR_RETURN_IF_ERROR(backend_.device_context().MakeCurrent());
  const DriverApi& api = backend_.device_context().api();
  CUstream s = static_cast<CUstream>(stream);
  TAILOR_RETURN_IF_ERROR(
      CudaResultToStatus(api.cuMemsetD8Async(DevicePointer(scratch), 0xff,
                                             kPrefillErrorWords * 8, s),
                         "cuMemsetD8Async(ragged errors)"));
  if (s != nullptr) return absl::OkStatus();
  return CudaResultToStatus(api.cuStreamSynchronize(nullptr),
                            "cuStreamSynchronize");
}

absl::Status CudaRaggedKernels::UploadPlan(Engine&, const void* host,
                                           void* device, size_t bytes,
                                           void* stream) {
  if (bytes == 0) return absl::OkStatus();
  TAILOR_RETURN_IF_ERROR(backend_.device_context().MakeCurrent());
  return CudaResultToStatus(
      backend_.device_context().api().cuMemcpyHtoDAsync(
          DevicePointer(device), host, bytes, static_cast<CUstream>(stream)),
      "cuMemcpyHtoDAsync(ragged plan)");
}

absl::StatusOr<RaggedErrors> CudaRaggedKernels::TakeErrors(Engine&,
                                                           void* scratch,
                                                           void* stream) {
  TAILOR_RETURN_IF_ERROR(backend_.device_context().MakeCurrent());
  const DriverApi& api = backend_.device_context().api();
  CUstream s = static_cast<CUstream>(stream);
  unsigned long long words[kPrefillErrorWords];
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuMemcpyDtoHAsync(words, DevicePointer(scratch), sizeof(words), s),
      "cuMemcpyDtoHAsync(ragged errors)"));
  TAILOR_RETURN_IF_ERROR(
      CudaResultToStatus(api.cuStreamSynchronize(s), "cuStreamSynchronize"));
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuMemsetD8Async(DevicePointer(scratch), 0xff, sizeof(words), s),
      "cuMemsetD8Async(ragged errors)"));
  RaggedErrors errors;
  errors.bad_page =
      gpu::DecodeErrorWordAs<RaggedErrors::Bad>(words[kPrefillErrorBadPage]);
  errors.bad_kv_len =
      gpu::DecodeErrorWordAs<RaggedErrors::Bad>(words[kPrefillErrorBadKvLen]);
  return errors;
}

bool CudaRaggedKernels::MayReplay(Engine&, void* stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (!backend_.device_context().MakeCurrent().ok()) return true;
  const CUresult result = backend_.device_context().api().cuStreamIsCapturing(
      static_cast<CUstream>(stream), &status);
  return result != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

namespace {

// Checks `spec` and copies its pooled descriptor into `map`.
absl::Status MapInto(CudaBackend& backend, const TensorMapSpec& spec,
                     absl::string_view name, TensorMap& map) {
  absl::Status legal = CheckTensorMap(spec, backend.compute_capability());
  if (!legal.ok()) {
    return absl::Status(legal.code(),
                        absl::StrCat(name,
                                     ": no TMA descriptor for the sm_90a "
                                     "ragged kernel: ",
                                     legal.message()));
  }
  TAILOR_ASSIGN_OR_RETURN(TensorMapBytes bytes,
                          backend.descriptor_pool().GetOrEncode(spec));
  std::memcpy(&map, bytes.bytes, sizeof(TensorMap));
  return absl::OkStatus();
}

// The four maps of `l` from the descriptor pool. The q / out maps span the
// whole q / out tensors (not this step's rows), so a graph captured on
// them replays any plan, with one descriptor each.
absl::Status EncodeMaps(CudaBackend& backend, const RaggedLaunch& l,
                        PrefillParams& params) {
  const int pack = l.config.head_pack;
  TAILOR_RETURN_IF_ERROR(
      MapInto(backend,
              RowsMapSpec(l, l.q, l.q_stride_token, l.q_stride_head, l.q_rows,
                          pack, kPrefillTileRows),
              "q", params.q_map));
  TAILOR_RETURN_IF_ERROR(
      MapInto(backend,
              RowsMapSpec(l, l.out, l.out_stride_token, l.out_stride_head,
                          l.q_rows, pack, kPrefillConsumerRows),
              "out", params.out_map));
  TAILOR_RETURN_IF_ERROR(MapInto(backend,
                                 CacheMapSpec(l, l.k_cache, l.k_strides),
                                 "k_cache", params.k_map));
  return MapInto(backend, CacheMapSpec(l, l.v_cache, l.v_strides), "v_cache",
                 params.v_map);
}

void FillParams(const RaggedLaunch& l, PrefillParams& p) {
  p.q = l.q;
  p.q_stride_token = l.q_stride_token;
  p.q_stride_head = l.q_stride_head;
  gpu::CopyPagedCaches(l, p);
  p.out = l.out;
  p.out_stride_token = l.out_stride_token;
  p.out_stride_head = l.out_stride_head;
  p.lse = l.lse;
  p.lse_stride_token = l.lse_stride_token;
  p.page_indptr = l.page_indptr;
  p.items = reinterpret_cast<const PrefillWorkItem*>(l.work.items);
  p.worker_begin = l.work.worker_begin;
  p.partial_out = l.work.partial_out;
  p.partial_lse = l.work.partial_lse;
  p.errors = static_cast<unsigned long long*>(l.work.scratch);
  p.kv_lens = l.kv_lens;
  if (l.soft_cap > 0) {
    p.score_scale = l.soft_cap * kLog2e;
    p.cap_scale = l.sm_scale / l.soft_cap;
  } else {
    p.score_scale = l.sm_scale * kLog2e;
    p.cap_scale = 0;
  }
  p.causal = l.shape.causal ? 1 : 0;
  p.window_left = static_cast<int>(l.shape.window_left);
  p.group = static_cast<int>(l.shape.group());
  p.page_size = static_cast<int>(l.shape.page_size);
  p.head_pack = l.config.head_pack;
  p.tile_rows = l.config.tile_rows;
}

// The generic kernel `first` stands for (bf16 D = 64 of its kind) at
// `shape`'s dtype and head dim (64, 128 or 256).
GenericKernelId GenericIdOf(GenericKernelId first, const RaggedShape& shape) {
  const int by_dim = shape.head_dim == 64 ? 0 : shape.head_dim == 128 ? 1 : 2;
  const int by_dtype = shape.dtype == DType::kBF16 ? 0 : 3;
  return static_cast<GenericKernelId>(static_cast<int>(first) + by_dtype +
                                      by_dim);
}

// Launches `selected` (the generic kernel through LaunchFallback).
template <typename Params>
absl::Status LaunchSelected(Engine& engine, const SpecKey& key,
                            const SelectedKernel& selected,
                            const LaunchConfig& config, const Params& params) {
  if (selected.generic) {
    return engine.LaunchFallback(key.op, *selected.kernel, config, &params,
                                 sizeof(params));
  }
  return engine.Launch(key.op, *selected.kernel, config, params);
}

}  // namespace

absl::Status CudaRaggedKernels::Run(Engine& engine, const RaggedLaunch& l) {
  if (l.q_rows == 0) return absl::OkStatus();  // no plan has rows here
  TAILOR_RETURN_IF_ERROR(LaunchAttention(engine, l));
  if (l.work.max_partials == 0) return absl::OkStatus();
  return LaunchMerge(engine, l);
}

// The specialized kernel, or (background JIT, while it compiles) the
// generic portable kernel, which runs the plan of either kernel.
absl::Status CudaRaggedKernels::LaunchAttention(Engine& engine,
                                                const RaggedLaunch& l) {
  const bool portable =
      RaggedUsesPortable(backend_.arch(), l.shape, portable_forced_);
  PrefillParams params = {};
  // The portable kernels read everything by pointer: no TMA descriptors.
  if (!portable) TAILOR_RETURN_IF_ERROR(EncodeMaps(backend_, l, params));
  FillParams(l, params);

  const SpecKey key =
      KernelSpecOf(l.shape, l.config, portable, pipeline_checks_)
          .Key(engine.target());
  TAILOR_ASSIGN_OR_RETURN(
      const SelectedKernel selected,
      backend_.generic_kernels().Select(
          engine, key, engine.GeneratorFor(key.op, &GenerateCudaRagged),
          GenericIdOf(GenericKernelId::kRaggedBf16D64, l.shape)));
  const bool sm80 = portable || selected.generic;
  const int head_dim = static_cast<int>(l.shape.head_dim);
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(l.config.num_workers);
  config.block.x = sm80 ? kPrefillSm80Threads : kPrefillThreads;
  config.shared_bytes = sm80 ? PrefillSm80SharedBytes(head_dim)
                             : PrefillSm90SharedBytes(head_dim);
  config.stream = l.stream;
  return LaunchSelected(engine, key, selected, config, params);
}

// The merge reads the plan's group count on the device, so a captured
// graph launches it for every plan.
absl::Status CudaRaggedKernels::LaunchMerge(Engine& engine,
                                            const RaggedLaunch& l) {
  const SpecKey merge_key =
      tailor::internal::RaggedMergeSpecFor(l.shape, l.config)
          .Key(engine.target());
  TAILOR_ASSIGN_OR_RETURN(
      const SelectedKernel merge,
      backend_.generic_kernels().Select(
          engine, merge_key,
          engine.GeneratorFor(merge_key.op, &GenerateCudaRagged),
          GenericIdOf(GenericKernelId::kRaggedMergeBf16D64, l.shape)));
  const PrefillMergeParams merge_params =
      gpu::RaggedMergeParamsOf(l, l.config.tile_rows);
  LaunchConfig merge_config;
  merge_config.grid.x = static_cast<uint32_t>(l.config.num_workers);
  merge_config.block.x = kMergeThreads;
  merge_config.stream = l.stream;
  return LaunchSelected(engine, merge_key, merge, merge_config, merge_params);
}

}  // namespace tailor::cuda
