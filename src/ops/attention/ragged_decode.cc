// A ragged step's q_len = 1 rows on the paged-decode kernels: the partition,
// the decode plan and its upload, the launch and its errors.
#include "ops/attention/ragged_decode.h"

#include <cmath>

#include "api/internals.h"
#include "ops/attention/checks.h"
#include "plan/decode_plan.h"
#include "plan/ragged_partition.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

int64_t DecodePartialsOf(const DecodePlanConfig& config) {
  return plan::MaxDecodePartials(config.num_workers, config.head_group);
}

// Copies `count` elements of `host` to `offset` of `base` on `stream`.
template <typename T>
absl::Status UploadArray(DecodeKernels& kernels, Engine& engine, const T* host,
                         size_t count, char* device, void* stream) {
  if (count == 0) return absl::OkStatus();
  return kernels.UploadPlan(engine, host, device, count * sizeof(T), stream);
}

absl::Status UploadDecodeRows(Runtime& runtime, DecodeKernels& kernels,
                              const RaggedWorkspaceImpl& w, void* stream) {
  Engine& engine = EngineOf(runtime);
  const RaggedDeviceBuffers& b = *w.device;
  const DecodeDeviceBuffers d = b.DecodeBuffers();
  const RaggedDecodeRows& rows = w.decode;
  char* base = b.base;
  TAILOR_RETURN_IF_ERROR(
      UploadArray(kernels, engine, rows.items.data(), rows.items.size(),
                  static_cast<char*>(d.at(d.items)), stream));
  TAILOR_RETURN_IF_ERROR(UploadArray(
      kernels, engine, rows.first_items.data(), rows.first_items.size(),
      static_cast<char*>(d.at(d.first_items)), stream));
  const auto begin = rows.plan.worker_begin();
  char* begin_at = static_cast<char*>(d.at(d.worker_begin));
  TAILOR_RETURN_IF_ERROR(UploadArray(kernels, engine, begin.data(),
                                     begin.size(), begin_at, stream));
  TAILOR_RETURN_IF_ERROR(UploadArray(kernels, engine, &rows.launch_flags, 1,
                                     begin_at + begin.size() * sizeof(int32_t),
                                     stream));
  // Row b of q / out / lse and the KV length of b: what item.seq = b reads.
  const auto q_begin = w.plan.q_begin();
  TAILOR_RETURN_IF_ERROR(UploadArray(kernels, engine, q_begin.data(),
                                     q_begin.size(), base + b.q_rows, stream));
  const auto kv_lens = w.plan.kv_lens();
  return UploadArray(kernels, engine, kv_lens.data(), kv_lens.size(),
                     base + b.seq_lens, stream);
}

}  // namespace

std::optional<DecodeShape> RaggedDecodeShapeOf(const RaggedShape& shape) {
  if (shape.window_left >= 0) return std::nullopt;
  absl::StatusOr<DecodeShape> decode =
      CheckDecodeShape({.num_qo_heads = shape.num_qo_heads,
                        .num_kv_heads = shape.num_kv_heads,
                        .head_dim = shape.head_dim,
                        .page_size = shape.page_size,
                        .dtype = shape.dtype},
                       "");
  if (!decode.ok()) return std::nullopt;
  return *decode;
}

DecodeCapacity RaggedDecodeCapacity(Runtime& runtime, const RaggedShape& shape,
                                    const RaggedPlanConfig& config,
                                    int64_t max_batch) {
  const std::optional<DecodeShape> decode = RaggedDecodeShapeOf(shape);
  if (!config.decode_rows || max_batch < 1 || !decode) return {};
  absl::StatusOr<DecodeKernels*> kernels =
      DecodeKernelsOf(runtime, "attention.reserve_ragged");
  if (!kernels.ok()) return {};
  absl::StatusOr<DecodePlanConfig> decode_config =
      (*kernels)->PlanConfig(*decode, max_batch, {});
  if (!decode_config.ok()) return {};  // the rows stay in tiles
  return DecodeCapacityFor(
      *decode, max_batch, *decode_config,
      (*kernels)->ScratchBytes(DecodePartialsOf(*decode_config)));
}

absl::Status ReserveRaggedDecodeRows(Runtime& runtime, const RaggedShape& shape,
                                     const DecodeCapacity& capacity,
                                     RaggedDecodeRows& rows) {
  const std::optional<DecodeShape> decode = RaggedDecodeShapeOf(shape);
  if (capacity.batch == 0 || !decode) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.reserve_ragged"));
  TAILOR_ASSIGN_OR_RETURN(DecodePlanConfig config,
                          kernels->PlanConfig(*decode, capacity.batch, {}));
  rows.seqs.reserve(capacity.batch);
  rows.kv_lens.reserve(capacity.batch);
  rows.items.reserve(capacity.items);
  rows.first_items.reserve(capacity.workers);
  return rows.plan.Reserve(capacity.batch,
                           DecodePlanParamsFor(*decode, config));
}

absl::Status InitRaggedDecodeScratch(Runtime& runtime,
                                     const RaggedDeviceBuffers& buffers,
                                     void* stream) {
  if (buffers.capacity.decode.batch == 0) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.reserve_ragged"));
  const DecodeDeviceBuffers d = buffers.DecodeBuffers();
  return kernels->InitScratch(EngineOf(runtime), d.at(d.scratch),
                              d.capacity.partials, stream);
}

absl::Status PlanRaggedDecodeRows(Runtime& runtime, const RaggedShape& shape,
                                  RaggedWorkspaceImpl& w, void* stream) {
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.plan_ragged"));
  const std::optional<DecodeShape> decode = RaggedDecodeShapeOf(shape);
  if (!decode) {
    return absl::InternalError(
        "attention.plan_ragged: decode rows reserved for a shape the decode "
        "kernels do not take");
  }
  RaggedDecodeRows& rows = w.decode;
  rows.shape = *decode;
  plan::CollectDecodeRows(w.plan.q_lens(), w.plan.kv_lens(), &rows.seqs,
                          &rows.kv_lens);
  const DecodeDeviceBuffers d = w.device->DecodeBuffers();
  // The reservation's bucket, not this step's count: every plan of the
  // workspace launches the same grid.
  TAILOR_ASSIGN_OR_RETURN(
      DecodePlanConfig config,
      kernels->PlanConfig(*decode, d.capacity.batch, rows.kv_lens));
  TAILOR_RETURN_IF_ERROR(CheckDecodeFits(
      d,
      DecodeCapacityFor(*decode, static_cast<int64_t>(rows.seqs.size()), config,
                        kernels->ScratchBytes(DecodePartialsOf(config)))));
  TAILOR_RETURN_IF_ERROR(plan::BuildDecodePlan(
      rows.kv_lens, DecodePlanParamsFor(*decode, config), &rows.plan));
  rows.launch_flags =
      config.launch_flags |
      (rows.plan.params().head_group > 1 ? config.head_group_flags : 0) |
      (rows.plan.cluster_merges() ? config.cluster_flags : 0);
  plan::RenumberDecodeItems(rows.plan, rows.seqs, &rows.items,
                            &rows.first_items);
  return UploadDecodeRows(runtime, *kernels, w, stream);
}

absl::Status RunRaggedDecodeRows(Runtime& runtime,
                                 const attention::RunRaggedArgs& args,
                                 RaggedWorkspaceImpl& w) {
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.run_ragged"));
  const RaggedDeviceBuffers& b = *w.device;
  const DecodeDeviceBuffers d = b.DecodeBuffers();
  DecodeLaunch l;
  l.shape = w.decode.shape;
  l.q = args.q.data;
  l.q_stride_b = args.q.strides[0];
  l.q_stride_h = args.q.strides[1];
  l.q_rows = static_cast<const int32_t*>(b.at(b.q_rows));
  l.k_cache = args.k_cache.data;
  l.v_cache = args.v_cache.data;
  for (int i = 0; i < 3; ++i) {
    l.k_strides[i] = args.k_cache.strides[i];
    l.v_strides[i] = args.v_cache.strides[i];
  }
  l.num_pages = args.k_cache.dims[0];
  l.block_table = args.block_table.as<int32_t>();
  l.block_table_stride = args.block_table.strides[0];
  l.max_pages = args.block_table.dims[args.block_table.rank - 1];
  l.seq_lens = static_cast<const int32_t*>(b.at(b.seq_lens));
  l.out = args.out.data;
  l.out_stride_b = args.out.strides[0];
  l.out_stride_h = args.out.strides[1];
  if (args.lse.has_value()) {
    l.lse = args.lse->as<float>();
    l.lse_stride_b = args.lse->strides[0];
  }
  l.sm_scale = args.sm_scale.value_or(
      1.0f / std::sqrt(static_cast<float>(w.shape.head_dim)));
  l.soft_cap = args.logits_soft_cap;
  DecodeWorkRef& work = l.work;
  work.items = static_cast<const plan::DecodeWorkItem*>(d.at(d.items));
  work.worker_begin = static_cast<const int32_t*>(d.at(d.worker_begin));
  work.first_items =
      static_cast<const plan::DecodeWorkItem*>(d.at(d.first_items));
  work.partial_out = static_cast<float*>(d.at(d.partial_out));
  work.partial_lse = static_cast<float*>(d.at(d.partial_lse));
  work.scratch = d.at(d.scratch);
  work.max_partials = d.capacity.partials;
  work.num_workers = w.decode.plan.params().num_workers;
  work.cluster_workers = w.decode.plan.params().cluster_workers;
  l.stream = args.stream;
  return kernels->Decode(EngineOf(runtime), l);
}

absl::StatusOr<DecodeErrors> TakeRaggedDecodeErrors(Runtime& runtime,
                                                    RaggedWorkspaceImpl& w,
                                                    void* stream) {
  if (!w.device || w.device->capacity.decode.batch == 0) {
    return DecodeErrors{};
  }
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.ragged errors"));
  const DecodeDeviceBuffers d = w.device->DecodeBuffers();
  return kernels->TakeErrors(EngineOf(runtime), d.at(d.scratch),
                             d.capacity.partials, stream);
}

}  // namespace tailor::internal
