#include "backends/hip/attention/ragged_kernels.h"

#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/gpu/attention_launch.h"
#include "backends/gpu/error_words.h"
#include "ops/attention/ragged_spec.h"
#include "tailor/status.h"
#include "templates/hip/attention/ragged_params.h"

namespace tailor::hip {

using ::tailor::internal::Engine;
using ::tailor::internal::Kernel;
using ::tailor::internal::KernelSource;
using ::tailor::internal::LaunchConfig;
using ::tailor::internal::OpKind;
using ::tailor::internal::RaggedErrors;
using ::tailor::internal::RaggedKernelSpec;
using ::tailor::internal::RaggedLaunch;
using ::tailor::internal::RaggedMergeSpec;
using ::tailor::internal::RaggedPlanConfig;
using ::tailor::internal::RaggedShape;
using ::tailor::internal::SpecKey;

// The kernels read the plan's items and merge groups as their own.
static_assert(sizeof(PrefillWorkItem) ==
              sizeof(tailor::plan::AttentionWorkItem));
static_assert(sizeof(PrefillMergeGroup) ==
              sizeof(tailor::plan::AttentionMergeGroup));
static_assert(HipRaggedLdsBytes(256) <= 64 * 1024, "LDS of a work-group");

namespace {

int32_t HeadPackOf(int64_t group) {
  int32_t pack = 1;
  while (pack < 16 && group % (pack * 2) == 0) pack *= 2;
  return pack;
}

const char* BoolName(DType dtype) {
  return dtype == DType::kBF16 ? "true" : "false";
}

HipRaggedParams ParamsOf(const RaggedLaunch& l) {
  HipRaggedParams p = {};
  p.q = l.q;
  p.q_stride_token = l.q_stride_token;
  p.q_stride_head = l.q_stride_head;
  gpu::CopyPagedCaches(l, p);
  p.page_indptr = l.page_indptr;
  p.kv_lens = l.kv_lens;
  p.out = l.out;
  p.out_stride_token = l.out_stride_token;
  p.out_stride_head = l.out_stride_head;
  p.lse = l.lse;
  p.lse_stride_token = l.lse_stride_token;
  p.items = reinterpret_cast<const PrefillWorkItem*>(l.work.items);
  p.worker_begin = l.work.worker_begin;
  p.partial_out = l.work.partial_out;
  p.partial_lse = l.work.partial_lse;
  p.errors = static_cast<unsigned long long*>(l.work.scratch);
  constexpr float kLog2e = 1.4426950408889634f;
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
  return p;
}

absl::StatusOr<KernelSource> AttentionSource(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const RaggedKernelSpec spec,
                          RaggedKernelSpec::FromKey(key));
  if (spec.tile_rows != kHipRaggedTileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("key.tile.m (tile rows): the hip kernel tiles by ",
                     kHipRaggedTileRows, ", got ", spec.tile_rows));
  }
  if (spec.portable || spec.pipeline_checks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key.variant: the hip kernel has no variants, got ", key.variant));
  }
  if (!HipRaggedHeadDimFits(spec.head_dim) || spec.page_size < 1 ||
      spec.page_size > 256 || spec.head_pack != HeadPackOf(spec.group)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key.dims: the hip kernel needs D in {64, 128, 256}, pages of 1 to "
        "256 and the group's head pack, got ",
        spec.ToString()));
  }
  return KernelSource{
      .code = absl::StrCat(
          "#include \"templates/hip/attention/ragged.h\"\n"
          "TAILOR_HIP_ENTRY(tailor_entry, (tailor::hip::HipRaggedAttention<",
          BoolName(spec.dtype), ", ", spec.head_dim, ", ", spec.head_pack, ", ",
          spec.page_size, ">))\n"),
      .entry = "tailor_entry"};
}

absl::StatusOr<KernelSource> MergeSource(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const RaggedMergeSpec spec,
                          RaggedMergeSpec::FromKey(key));
  if (spec.tile_rows != kHipRaggedTileRows ||
      !HipRaggedHeadDimFits(spec.head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: the hip merge reads slots of ", kHipRaggedTileRows,
                     " rows of D in {64, 128, 256}, got ", spec.ToString()));
  }
  return KernelSource{
      .code = absl::StrCat(
          "#include \"templates/hip/attention/ragged.h\"\n"
          "TAILOR_HIP_ENTRY(tailor_entry, (tailor::hip::HipRaggedMerge<",
          BoolName(spec.dtype), ", ", spec.head_dim, ">))\n"),
      .entry = "tailor_entry"};
}

}  // namespace

absl::StatusOr<RaggedPlanConfig> HipRaggedPlanConfig(const RaggedShape& shape,
                                                     int workers) {
  if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16) {
    return absl::UnimplementedError(
        absl::StrCat("dtype: the hip ragged kernel serves bf16 and f16, got ",
                     std::string(DTypeName(shape.dtype))));
  }
  if (!HipRaggedHeadDimFits(shape.head_dim)) {
    return absl::UnimplementedError(absl::StrCat(
        "head_dim: the hip ragged kernel serves 64, 128 and 256, got ",
        shape.head_dim));
  }
  if (shape.page_size < 1 || shape.page_size > 256) {
    return absl::UnimplementedError(
        absl::StrCat("page_size: the hip ragged kernel serves pages of 1 to "
                     "256 tokens, got ",
                     shape.page_size));
  }
  const int32_t block = HipRaggedKvBlock(static_cast<int>(shape.head_dim));
  return RaggedPlanConfig{.head_pack = HeadPackOf(shape.group()),
                          .tile_rows = kHipRaggedTileRows,
                          .kv_block = block,
                          .num_workers = workers > 0 ? workers : 1,
                          .item_cost = block,
                          .masked_block_extra = block / 4,
                          .min_piece_blocks = 4,
                          .max_pieces = 16,
                          .decode_rows = false};
}

absl::StatusOr<KernelSource> GenerateHipRagged(const SpecKey& key) {
  if (key.op == OpKind::kAttentionRagged) return AttentionSource(key);
  if (key.op == OpKind::kAttentionRaggedMerge) return MergeSource(key);
  return absl::UnimplementedError(absl::StrCat(
      "hip ragged kernels: no generator for ", GetOpInfo(key.op).name));
}

absl::StatusOr<RaggedPlanConfig> HipRaggedKernels::PlanConfig(
    const RaggedShape& shape) {
  return HipRaggedPlanConfig(shape, workers_);
}

int64_t HipRaggedKernels::ScratchBytes() const {
  return kPrefillErrorWords * 8;
}

absl::Status HipRaggedKernels::InitScratch(Engine&, void* scratch,
                                           void* stream) {
  TAILOR_RETURN_IF_ERROR(
      backend_.FillDevice(scratch, 0xff, kPrefillErrorWords * 8, stream));
  // ReserveRaggedWorkspace passes no stream: finish the fill there.
  if (stream != nullptr) return absl::OkStatus();
  return backend_.CopyToHost(nullptr, nullptr, 0, stream);
}

absl::Status HipRaggedKernels::UploadPlan(Engine&, const void* host,
                                          void* device, size_t bytes,
                                          void* stream) {
  if (bytes == 0) return absl::OkStatus();
  return backend_.CopyToDevice(device, host, bytes, stream);
}

absl::StatusOr<RaggedErrors> HipRaggedKernels::TakeErrors(Engine&,
                                                          void* scratch,
                                                          void* stream) {
  unsigned long long words[kPrefillErrorWords];
  TAILOR_RETURN_IF_ERROR(
      backend_.CopyToHost(words, scratch, sizeof(words), stream));
  TAILOR_RETURN_IF_ERROR(
      backend_.FillDevice(scratch, 0xff, sizeof(words), stream));
  RaggedErrors errors;
  errors.bad_page =
      gpu::DecodeErrorWordAs<RaggedErrors::Bad>(words[kPrefillErrorBadPage]);
  errors.bad_kv_len =
      gpu::DecodeErrorWordAs<RaggedErrors::Bad>(words[kPrefillErrorBadKvLen]);
  return errors;
}

absl::Status HipRaggedKernels::Run(Engine& engine, const RaggedLaunch& l) {
  if (l.q_rows == 0) return absl::OkStatus();  // no plan has rows here
  const SpecKey key = tailor::internal::RaggedKernelSpecFor(l.shape, l.config)
                          .Key(engine.target());
  TAILOR_ASSIGN_OR_RETURN(
      std::shared_ptr<Kernel> kernel,
      engine.GetKernel(key, engine.GeneratorFor(key.op, &GenerateHipRagged)));
  const HipRaggedParams params = ParamsOf(l);
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(l.config.num_workers);
  config.block.x = kHipRaggedThreads;
  config.stream = l.stream;
  TAILOR_RETURN_IF_ERROR(
      engine.Launch(key.op, *kernel, config, &params, sizeof(params)));
  if (l.work.max_partials == 0) return absl::OkStatus();

  const SpecKey merge_key =
      tailor::internal::RaggedMergeSpecFor(l.shape, l.config)
          .Key(engine.target());
  TAILOR_ASSIGN_OR_RETURN(
      std::shared_ptr<Kernel> merge,
      engine.GetKernel(merge_key,
                       engine.GeneratorFor(merge_key.op, &GenerateHipRagged)));
  const PrefillMergeParams merge_params =
      gpu::RaggedMergeParamsOf(l, kHipRaggedTileRows);
  LaunchConfig merge_config;
  merge_config.grid.x = static_cast<uint32_t>(l.config.num_workers);
  merge_config.block.x = kHipRaggedMergeThreads;
  merge_config.stream = l.stream;
  return engine.Launch(merge_key.op, *merge, merge_config, &merge_params,
                       sizeof(merge_params));
}

}  // namespace tailor::hip
