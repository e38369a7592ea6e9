#include "backends/hip/attention/decode_kernels.h"

#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/gpu/attention_launch.h"
#include "backends/gpu/error_words.h"
#include "ops/attention/decode_spec.h"
#include "plan/decode_plan.h"
#include "tailor/status.h"
#include "templates/hip/attention/decode_params.h"

namespace tailor::hip {

using ::tailor::cuda::DecodeScratchBytes;
using ::tailor::internal::DecodeErrors;
using ::tailor::internal::DecodeLaunch;
using ::tailor::internal::DecodePlanConfig;
using ::tailor::internal::DecodeShape;
using ::tailor::internal::DecodeSpec;
using ::tailor::internal::Engine;
using ::tailor::internal::Kernel;
using ::tailor::internal::KernelSource;
using ::tailor::internal::KeyTarget;
using ::tailor::internal::LaunchConfig;
using ::tailor::internal::OpKind;
using ::tailor::internal::SpecKey;

static_assert(sizeof(DecodeWorkItem) == sizeof(tailor::plan::DecodeWorkItem));

namespace {

unsigned long long* ErrorWords(void* scratch, int64_t max_partials) {
  return reinterpret_cast<unsigned long long*>(
      static_cast<char*>(scratch) + DecodeScratchBytes(max_partials) -
      kDecodeErrorWords * 8);
}

HipDecodeParams ParamsOf(const DecodeLaunch& l) {
  HipDecodeParams p = {};
  p.q = l.q;
  p.q_stride_b = l.q_stride_b;
  p.q_stride_h = l.q_stride_h;
  gpu::CopyPagedCaches(l, p);
  p.seq_lens = l.seq_lens;
  p.out = l.out;
  p.out_stride_b = l.out_stride_b;
  p.out_stride_h = l.out_stride_h;
  p.lse = l.lse;
  p.lse_stride_b = l.lse_stride_b;
  constexpr float kLog2e = 1.4426950408889634f;
  if (l.soft_cap > 0) {
    p.score_scale = kLog2e * l.soft_cap;
    p.cap_scale = l.sm_scale / l.soft_cap;
  } else {
    p.score_scale = l.sm_scale * kLog2e;
    p.cap_scale = 0;
  }
  p.items = reinterpret_cast<const DecodeWorkItem*>(l.work.items);
  p.worker_begin = l.work.worker_begin;
  p.partial_out = l.work.partial_out;
  p.partial_lse = l.work.partial_lse;
  p.counters = static_cast<int*>(l.work.scratch);
  p.errors = ErrorWords(l.work.scratch, l.work.max_partials);
  return p;
}

}  // namespace

absl::StatusOr<SpecKey> HipDecodeKey(const KeyTarget& target,
                                     const DecodeShape& shape) {
  if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: must be bf16 or f16, got ",
                     std::string(DTypeName(shape.dtype))));
  }
  if (!HipDecodeShapeFits(shape.head_dim, shape.group)) {
    return absl::UnimplementedError(absl::StrCat(
        "hip decode: head_dim ", shape.head_dim, " with group ", shape.group,
        " has no kernel (D in {64, 128, 256}, group in [1, 16], group * D <= ",
        kHipDecodeMaxGroupTimesDim, ")"));
  }
  if (shape.page_size < 1 || shape.page_size > 256) {
    return absl::UnimplementedError(absl::StrCat(
        "hip decode: page_size must be in [1, 256], got ", shape.page_size));
  }
  return DecodeSpec{.dtype = shape.dtype,
                    .head_dim = shape.head_dim,
                    .group = shape.group,
                    .page_size = shape.page_size,
                    .tile_tokens = kDecodeTileTokens}
      .ToKey(target);
}

absl::StatusOr<KernelSource> GenerateHipDecode(const SpecKey& key) {
  if (key.op != OpKind::kAttentionDecode) {
    return absl::UnimplementedError(absl::StrCat(
        "hip decode kernels: no generator for ", GetOpInfo(key.op).name));
  }
  TAILOR_ASSIGN_OR_RETURN(const DecodeSpec spec, DecodeSpec::FromKey(key));
  const DecodeShape shape = {.dtype = spec.dtype,
                             .head_dim = spec.head_dim,
                             .group = spec.group,
                             .page_size = spec.page_size};
  // The template's shapes: the key this backend builds for them.
  TAILOR_ASSIGN_OR_RETURN(const SpecKey built,
                          HipDecodeKey({key.backend, key.arch_name()}, shape));
  if (!(built == key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: not a hip decode key (its build is ",
                     built.ToString(), "), got ", key.ToString()));
  }
  return KernelSource{
      .code = absl::StrCat(
          "#include \"templates/hip/attention/decode.h\"\n"
          "TAILOR_HIP_ENTRY(tailor_entry, (tailor::hip::HipPagedDecode<",
          spec.dtype == DType::kBF16 ? "true" : "false", ", ", spec.head_dim,
          ", ", spec.group, ", ", spec.page_size, ">))\n"),
      .entry = "tailor_entry"};
}

absl::StatusOr<DecodePlanConfig> HipDecodeKernels::PlanConfig(
    const DecodeShape& shape, int64_t /*bucket*/,
    absl::Span<const int32_t> /*seq_lens*/) {
  TAILOR_RETURN_IF_ERROR(
      HipDecodeKey({.backend = BackendKind::kHip}, shape).status());
  return DecodePlanConfig{.num_workers = workers_,
                          .tile_tokens = kDecodeTileTokens,
                          .item_cost_tokens = kItemCostTokens};
}

int64_t HipDecodeKernels::ScratchBytes(int64_t max_partials) const {
  return DecodeScratchBytes(max_partials);
}

absl::Status HipDecodeKernels::InitScratch(Engine&, void* scratch,
                                           int64_t max_partials, void* stream) {
  if (max_partials > 0) {
    TAILOR_RETURN_IF_ERROR(
        backend_.FillDevice(scratch, 0, 4 * max_partials, stream));
  }
  TAILOR_RETURN_IF_ERROR(backend_.FillDevice(
      ErrorWords(scratch, max_partials), 0xff, kDecodeErrorWords * 8, stream));
  // ReserveDecodeWorkspace passes no stream: finish the fills there.
  if (stream != nullptr) return absl::OkStatus();
  return backend_.CopyToHost(nullptr, nullptr, 0, stream);
}

absl::Status HipDecodeKernels::UploadPlan(Engine&, const void* host,
                                          void* device, size_t bytes,
                                          void* stream) {
  if (bytes == 0) return absl::OkStatus();
  return backend_.CopyToDevice(device, host, bytes, stream);
}

absl::StatusOr<DecodeErrors> HipDecodeKernels::TakeErrors(Engine&,
                                                          void* scratch,
                                                          int64_t max_partials,
                                                          void* stream) {
  unsigned long long words[kDecodeErrorWords];
  unsigned long long* device_words = ErrorWords(scratch, max_partials);
  TAILOR_RETURN_IF_ERROR(
      backend_.CopyToHost(words, device_words, sizeof(words), stream));
  TAILOR_RETURN_IF_ERROR(
      backend_.FillDevice(device_words, 0xff, sizeof(words), stream));
  auto decode = gpu::DecodeErrorWordAs<DecodeErrors::Bad>;
  DecodeErrors errors;
  errors.bad_page = decode(words[kDecodeErrorBadPage]);
  errors.bad_seq_len = decode(words[kDecodeErrorBadSeqLen]);
  errors.too_many_pages = decode(words[kDecodeErrorTooManyPages]);
  return errors;
}

absl::Status HipDecodeKernels::Decode(Engine& engine,
                                      const DecodeLaunch& launch) {
  if (launch.page_indptr != nullptr) {
    return absl::InternalError(
        "attention.decode: the hip kernel has no page_indptr (ragged decode "
        "rows)");
  }
  if (launch.q_rows != nullptr) {
    return absl::InternalError(
        "attention.decode: the hip kernel has no q_rows (ragged decode rows)");
  }
  if (launch.work.num_workers == 0) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(const SpecKey key,
                          HipDecodeKey(engine.target(), launch.shape));
  TAILOR_ASSIGN_OR_RETURN(
      std::shared_ptr<Kernel> kernel,
      engine.GetKernel(key, engine.GeneratorFor(key.op, &GenerateHipDecode)));
  const HipDecodeParams params = ParamsOf(launch);
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.work.num_workers);
  config.block.x = kHipDecodeThreads;
  config.stream = launch.stream;
  return engine.Launch(key.op, *kernel, config, &params, sizeof(params));
}

}  // namespace tailor::hip
