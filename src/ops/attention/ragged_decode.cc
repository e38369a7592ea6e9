// The q_len = 1 rows of a ragged step (and every row of a decode step) on
// the paged-decode kernels: the plan and its upload, the launch and its
// errors.
#include "ops/attention/ragged_decode.h"

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

// Enqueues the copy of `host` to `device`; nothing for an empty span.
template <typename T>
absl::Status UploadSpan(DecodeKernels& kernels, Engine& engine,
                        absl::Span<const T> host, void* device, void* stream) {
  if (host.empty()) return absl::OkStatus();
  return kernels.UploadPlan(engine, host.data(), device,
                            host.size() * sizeof(T), stream);
}

// The decode plan of `rows` (items renumbered to the step's b) into the
// decode block `d`: items, first items, worker ranges, and the launch flags
// right after the last worker range (workspace.h).
absl::Status UploadDecodeWork(DecodeKernels& kernels, Engine& engine,
                              const RaggedDecodeRows& rows,
                              const DecodeDeviceBuffers& d, void* stream) {
  TAILOR_RETURN_IF_ERROR(UploadSpan(
      kernels, engine, absl::MakeConstSpan(rows.items), d.at(d.items), stream));
  TAILOR_RETURN_IF_ERROR(UploadSpan(kernels, engine,
                                    absl::MakeConstSpan(rows.first_items),
                                    d.at(d.first_items), stream));
  const absl::Span<const int32_t> worker_begin = rows.plan.worker_begin();
  char* begin = static_cast<char*>(d.at(d.worker_begin));
  TAILOR_RETURN_IF_ERROR(
      UploadSpan(kernels, engine, worker_begin, begin, stream));
  return UploadSpan(kernels, engine, absl::MakeConstSpan(&rows.launch_flags, 1),
                    begin + worker_begin.size() * sizeof(int32_t), stream);
}

// The flags the decode kernel runs `plan` (built with `config`) under:
// config's own, plus its head-group and cluster bits when the plan uses them.
int32_t DecodeLaunchFlagsOf(const DecodePlanConfig& config,
                            const plan::DecodePlan& plan) {
  return config.launch_flags |
         (plan.params().head_group > 1 ? config.head_group_flags : 0) |
         (plan.cluster_merges() ? config.cluster_flags : 0);
}

// Host storage: partial buffers for the split pairs of `rows.plan`.
void GrowHostPartials(RaggedDecodeRows& rows, size_t partials) {
  const size_t group = rows.shape.group;
  const size_t row = group * rows.shape.head_dim;
  if (rows.partial_out.size() < partials * row) {
    rows.partial_out.resize(partials * row);
  }
  if (rows.partial_lse.size() < partials * group) {
    rows.partial_lse.resize(partials * group);
  }
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

absl::StatusOr<DecodeCapacity> DecodeRowsCapacity(DecodeKernels& kernels,
                                                  const DecodeShape& shape,
                                                  int64_t batch) {
  TAILOR_ASSIGN_OR_RETURN(DecodePlanConfig config,
                          kernels.PlanConfig(shape, batch, {}));
  return DecodeCapacityFor(shape, batch, config,
                           kernels.ScratchBytes(DecodePartialsOf(config)));
}

DecodeCapacity RaggedDecodeCapacity(Runtime& runtime, const RaggedShape& shape,
                                    const RaggedPlanConfig& config,
                                    int64_t max_batch) {
  const std::optional<DecodeShape> decode = RaggedDecodeShapeOf(shape);
  if (!config.decode_rows || max_batch < 1 || !decode) return {};
  absl::StatusOr<DecodeKernels*> kernels =
      DecodeKernelsOf(runtime, "attention.reserve_ragged");
  if (!kernels.ok()) return {};
  absl::StatusOr<DecodeCapacity> capacity =
      DecodeRowsCapacity(**kernels, *decode, max_batch);
  return capacity.ok() ? *capacity : DecodeCapacity{};  // else: in tiles
}

absl::Status ReserveDecodeRows(DecodeKernels& kernels, const DecodeShape& shape,
                               const DecodeCapacity& capacity, bool host,
                               RaggedDecodeRows& rows) {
  if (capacity.batch == 0) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(DecodePlanConfig config,
                          kernels.PlanConfig(shape, capacity.batch, {}));
  rows.shape = shape;
  rows.seqs.reserve(capacity.batch);
  rows.kv_lens.reserve(capacity.batch);
  rows.items.reserve(capacity.items);
  rows.first_items.reserve(capacity.workers);
  if (host) GrowHostPartials(rows, capacity.partials);
  return rows.plan.Reserve(capacity.batch, DecodePlanParamsFor(shape, config));
}

absl::Status InitRaggedDecodeScratch(Runtime& runtime,
                                     const RaggedDeviceBuffers& buffers,
                                     void* stream) {
  if (!buffers.has_decode_block()) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.reserve_ragged"));
  const DecodeDeviceBuffers d = buffers.DecodeBuffers();
  return kernels->InitScratch(EngineOf(runtime), d.at(d.scratch),
                              d.capacity.partials, stream);
}

absl::Status PlanDecodeRows(Runtime& runtime, DecodeKernels& kernels,
                            RaggedWorkspaceImpl& w, void* stream) {
  RaggedDecodeRows& rows = w.decode;
  const int64_t count = static_cast<int64_t>(rows.seqs.size());
  // The reservation's bucket, not this step's count: every plan of the
  // workspace launches the same grid, so a captured graph replays any.
  const int64_t bucket = w.device ? w.device->capacity.decode.batch : count;
  TAILOR_ASSIGN_OR_RETURN(DecodePlanConfig config,
                          kernels.PlanConfig(rows.shape, bucket, rows.kv_lens));
  if (w.device) {
    TAILOR_RETURN_IF_ERROR(CheckDecodeFits(
        w.device->DecodeBuffers(),
        DecodeCapacityFor(rows.shape, count, config,
                          kernels.ScratchBytes(DecodePartialsOf(config)))));
  }
  TAILOR_RETURN_IF_ERROR(plan::BuildDecodePlan(
      rows.kv_lens, DecodePlanParamsFor(rows.shape, config), &rows.plan));
  rows.launch_flags = DecodeLaunchFlagsOf(config, rows.plan);
  plan::RenumberDecodeItems(rows.plan, rows.seqs, &rows.items,
                            &rows.first_items);
  if (!w.device) {
    GrowHostPartials(rows, rows.plan.num_partials());
    return absl::OkStatus();
  }
  return UploadDecodeWork(kernels, EngineOf(runtime), rows,
                          w.device->DecodeBuffers(), stream);
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
  TAILOR_RETURN_IF_ERROR(PlanDecodeRows(runtime, *kernels, w, stream));
  // Row b of q / out / lse and the KV length of b: what item.seq = b reads.
  Engine& engine = EngineOf(runtime);
  const RaggedDeviceBuffers& b = *w.device;
  TAILOR_RETURN_IF_ERROR(
      UploadSpan(*kernels, engine, w.plan.q_begin(), b.at(b.q_rows), stream));
  return UploadSpan(*kernels, engine, w.plan.kv_lens(), b.at(b.seq_lens),
                    stream);
}

absl::Status RunDecodeRows(Runtime& runtime, DecodeKernels& kernels,
                           DecodeLaunch launch, RaggedWorkspaceImpl& w) {
  RaggedDecodeRows& rows = w.decode;
  DecodeWorkRef& work = launch.work;
  if (w.device) {
    const DecodeDeviceBuffers d = w.device->DecodeBuffers();
    work.items = static_cast<const plan::DecodeWorkItem*>(d.at(d.items));
    work.worker_begin = static_cast<const int32_t*>(d.at(d.worker_begin));
    work.first_items =
        static_cast<const plan::DecodeWorkItem*>(d.at(d.first_items));
    work.partial_out = static_cast<float*>(d.at(d.partial_out));
    work.partial_lse = static_cast<float*>(d.at(d.partial_lse));
    work.scratch = d.at(d.scratch);
    work.max_partials = d.capacity.partials;
  } else {
    // The host kernels read item.seq from the plan: the step's b only when
    // the rows are the identity (a decode step's).
    work.host_plan = &rows.plan;
    work.partial_out = rows.partial_out.data();
    work.partial_lse = rows.partial_lse.data();
  }
  work.num_workers = rows.plan.params().num_workers;
  work.cluster_workers = rows.plan.params().cluster_workers;
  return kernels.Decode(EngineOf(runtime), launch);
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
  // The caller's KV lengths, checked against the plan as RunDecode's
  // seq_lens are; else the planned ones.
  l.seq_lens = args.kv_lens.has_value()
                   ? args.kv_lens->as<int32_t>()
                   : static_cast<const int32_t*>(b.at(b.seq_lens));
  return RunDecodeRows(runtime, *kernels, l, w);
}

absl::StatusOr<DecodeErrors> TakeRaggedDecodeErrors(Runtime& runtime,
                                                    RaggedWorkspaceImpl& w,
                                                    void* stream) {
  if (!w.device || !w.device->has_decode_block()) return DecodeErrors{};
  TAILOR_ASSIGN_OR_RETURN(DecodeKernels * kernels,
                          DecodeKernelsOf(runtime, "attention.decode errors"));
  const DecodeDeviceBuffers d = w.device->DecodeBuffers();
  return kernels->TakeErrors(EngineOf(runtime), d.at(d.scratch),
                             d.capacity.partials, stream);
}

}  // namespace tailor::internal
