// A ragged step's q_len = 1 rows on the paged-decode kernels: the partition,
// the decode plan and its upload, the launch and its errors.
#include "ops/attention/ragged_decode.h"

#include "api/internals.h"
#include "ops/attention/checks.h"
#include "ops/attention/decode_launch.h"
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

// The decode plan (items renumbered to the step's b), then row b of q / out /
// lse and the KV length of b: what item.seq = b reads.
absl::Status UploadDecodeRows(Runtime& runtime, DecodeKernels& kernels,
                              const RaggedWorkspaceImpl& w, void* stream) {
  Engine& engine = EngineOf(runtime);
  const RaggedDeviceBuffers& b = *w.device;
  const RaggedDecodeRows& rows = w.decode;
  TAILOR_RETURN_IF_ERROR(
      UploadDecodeWork(kernels, engine,
                       {.items = rows.items,
                        .first_items = rows.first_items,
                        .worker_begin = rows.plan.worker_begin(),
                        .launch_flags = &rows.launch_flags},
                       b.DecodeBuffers(), stream));
  const auto q_begin = w.plan.q_begin();
  TAILOR_RETURN_IF_ERROR(UploadArray(kernels, engine, q_begin.data(),
                                     q_begin.size(), b.base + b.q_rows,
                                     stream));
  const auto kv_lens = w.plan.kv_lens();
  return UploadArray(kernels, engine, kv_lens.data(), kv_lens.size(),
                     b.base + b.seq_lens, stream);
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
  rows.launch_flags = DecodeLaunchFlagsOf(config, rows.plan);
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
  DecodeLaunch l = DecodeLaunchOf(args, w.decode.shape);
  l.q_rows = static_cast<const int32_t*>(b.at(b.q_rows));
  if (args.page_indptr.has_value()) {
    l.page_indptr = args.page_indptr->as<int32_t>();
  }
  l.seq_lens = static_cast<const int32_t*>(b.at(b.seq_lens));
  l.work = DeviceDecodeWork(b.DecodeBuffers(), w.decode.plan.params());
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
