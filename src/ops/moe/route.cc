// The inspector: Route (token routing -> expert-sorted rows + piecewise plan)
// on the host (host backends) or through the backend's device route, and
// PlanRows (plan for rows sorted elsewhere, host only).
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "core/engine.h"
#include "core/stats.h"
#include "ops/moe/checks.h"
#include "ops/moe/device_workspace.h"
#include "ops/moe/kernels.h"
#include "ops/moe/workspace.h"
#include "plan/bucket_policy.h"
#include "plan/piecewise_plan.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor {
namespace moe {

using internal::GrowTo;
using internal::MoeKernels;
using internal::MoeWorkspace;

namespace {

absl::StatusOr<MoeWorkspace*> WorkspaceOf(Workspace& ws) {
  if (internal::WorkspaceImplOf(ws) == nullptr) {
    return absl::FailedPreconditionError(
        "ws: this Workspace was moved from; assign a new one before use");
  }
  return internal::WorkspaceImplOf(ws);
}

// Checks the map's entries (in [-1, num_experts)), on the host.
absl::Status ValidateExpertMapEntries(const TensorRef& map,
                                      int64_t num_experts) {
  const int32_t* entries = map.as<int32_t>();
  for (int64_t g = 0; g < map.dims[0]; ++g) {
    if (entries[g] < -1 || entries[g] >= num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert_map[", g, "]: local id ", entries[g],
                       " is outside [-1, ", num_experts, ")"));
    }
  }
  return absl::OkStatus();
}

// Validates every id of the first `valid_tokens` tokens and writes its
// local expert (or -1) to w.local_ids; padding tokens get -1.
absl::Status MapToLocalExperts(const RouteArgs& args, int64_t valid_tokens,
                               MoeWorkspace& w) {
  const TensorRef& ids = args.topk_ids;
  const int64_t k = ids.dims[1];
  const int64_t assignments = ids.dims[0] * k;
  const int64_t valid = valid_tokens * k;
  const int32_t* map =
      args.expert_map ? args.expert_map->as<int32_t>() : nullptr;
  const int64_t id_limit =
      args.expert_map ? args.expert_map->dims[0] : args.num_experts;
  GrowTo(w.local_ids, assignments);
  std::fill(w.local_ids.begin() + valid, w.local_ids.begin() + assignments, -1);
  const int32_t* id = ids.as<int32_t>();
  for (int64_t i = 0; i < valid; ++i) {
    if (id[i] < 0 || id[i] >= id_limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("topk_ids[", i / k, ",", i % k, "]: expert id ", id[i],
                       " is outside [0, ", id_limit, ")"));
    }
    w.local_ids[i] = map != nullptr ? map[id[i]] : id[i];
  }
  return absl::OkStatus();
}

// counts -> offsets -> extents -> plan. Sets num_experts and num_rows.
absl::Status PlanFromCounts(int64_t num_experts, const plan::PlanParams& params,
                            MoeWorkspace& w) {
  GrowTo(w.offsets, num_experts + 1);
  GrowTo(w.extents, num_experts);
  w.offsets[0] = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    w.offsets[e + 1] = w.offsets[e] + w.counts[e];
    w.extents[e] = w.counts[e];
  }
  w.num_experts = num_experts;
  w.num_rows = w.offsets[num_experts];
  if (num_experts > w.plan_reserved_groups ||
      w.num_rows > w.plan_reserved_rows ||
      params.tile_rows != w.plan_reserved_tile_rows) {
    // The planner's buffers grow with the number of distinct tail classes
    // too; reserving for the worst case up front keeps later steps of up to
    // this size allocation-free.
    const int64_t groups = std::max(w.plan_reserved_groups, num_experts);
    const int64_t rows = std::max(w.plan_reserved_rows, w.num_rows);
    TAILOR_RETURN_IF_ERROR(w.plan.Reserve(groups, rows, params));
    w.plan_reserved_groups = groups;
    w.plan_reserved_rows = rows;
    w.plan_reserved_tile_rows = params.tile_rows;
  }
  return plan::BuildPiecewisePlan(
      absl::MakeConstSpan(w.extents.data(), num_experts), params, &w.plan);
}

// Stable counting sort of the assignments by local expert.
void SortAssignments(int64_t assignments, MoeWorkspace& w) {
  GrowTo(w.permutation, w.num_rows);
  GrowTo(w.inverse, assignments);
  // counts is free again once offsets are known: reuse it as the cursor.
  for (int64_t e = 0; e < w.num_experts; ++e) w.counts[e] = w.offsets[e];
  for (int64_t i = 0; i < assignments; ++i) {
    const int32_t e = w.local_ids[i];
    if (e < 0) {
      w.inverse[i] = -1;
      continue;
    }
    const int32_t row = w.counts[e]++;
    w.permutation[row] = static_cast<int32_t>(i);
    w.inverse[i] = row;
  }
  for (int64_t e = 0; e < w.num_experts; ++e)
    w.counts[e] = w.offsets[e + 1] - w.offsets[e];
}

// Shapes, dtypes and devices of the routing arguments (no contents).
absl::Status ValidateRouteShapes(const RouteArgs& args, Device device) {
  TAILOR_RETURN_IF_ERROR(internal::ExpectOperand("topk_ids", args.topk_ids, 2,
                                                 DType::kI32, device));
  const int64_t tokens = args.topk_ids.dims[0];
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectTopk("topk_ids", tokens, args.topk_ids.dims[1]));
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectExpertCount("num_experts", args.num_experts));
  if (args.expert_map) {
    TAILOR_RETURN_IF_ERROR(internal::ExpectOperand(
        "expert_map", *args.expert_map, 1, DType::kI32, device));
    TAILOR_RETURN_IF_ERROR(internal::ExpectExpertCount(
        "expert_map: dims[0] (E_global)", args.expert_map->dims[0]));
  }
  // A token's k ids are distinct experts of the model: the global ones
  // when an expert_map is set (a rank may own fewer than k), else E.
  TAILOR_RETURN_IF_ERROR(internal::ExpectTopkOfExperts(
      "topk_ids: dims[1] (k)", args.topk_ids.dims[1],
      args.expert_map ? "expert_map: dims[0] (E_global)" : "num_experts",
      args.expert_map ? args.expert_map->dims[0] : args.num_experts));
  if (args.valid_tokens) {
    TAILOR_RETURN_IF_ERROR(internal::ExpectOperand(
        "valid_tokens", *args.valid_tokens, 1, DType::kI32, device));
    TAILOR_RETURN_IF_ERROR(internal::ExpectDim(
        "valid_tokens", *args.valid_tokens, 0, 1, "one count"));
  }
  return absl::OkStatus();
}

absl::Status RouteOnHost(const RouteArgs& args, const plan::PlanParams& params,
                         MoeWorkspace& w) {
  const int64_t tokens = args.topk_ids.dims[0];
  const int64_t k = args.topk_ids.dims[1];
  if (args.expert_map) {
    TAILOR_RETURN_IF_ERROR(
        ValidateExpertMapEntries(*args.expert_map, args.num_experts));
  }
  int64_t valid_tokens = tokens;
  if (args.valid_tokens) {
    valid_tokens = *args.valid_tokens->as<int32_t>();
    if (valid_tokens < 0 || valid_tokens > tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("valid_tokens[0]: must be in [0, ", tokens,
                       "] (T = topk_ids.dims[0]), got ", valid_tokens));
    }
  }
  TAILOR_RETURN_IF_ERROR(MapToLocalExperts(args, valid_tokens, w));

  const int64_t assignments = tokens * k;
  GrowTo(w.counts, args.num_experts);
  std::fill_n(w.counts.begin(), args.num_experts, 0);
  for (int64_t i = 0; i < assignments; ++i) {
    if (w.local_ids[i] >= 0) ++w.counts[w.local_ids[i]];
  }
  TAILOR_RETURN_IF_ERROR(PlanFromCounts(args.num_experts, params, w));
  SortAssignments(assignments, w);
  return absl::OkStatus();
}

absl::Status RouteOnDevice(Runtime& runtime, MoeKernels& kernels,
                           const RouteArgs& args,
                           const plan::PlanParams& params, MoeWorkspace& w) {
  if (!w.device || !(w.device->device == runtime.device())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ws: not reserved on ", DeviceName(runtime.device()),
        "; call moe::ReserveWorkspace (or BindWorkspace) with this runtime "
        "first"));
  }
  const int64_t tokens = args.topk_ids.dims[0];
  const int64_t k = args.topk_ids.dims[1];
  const int64_t assignments = tokens * k;
  internal::MoeDeviceBuffers& d = *w.device;
  TAILOR_RETURN_IF_ERROR(internal::CheckFits(
      d, {.assignments = assignments,
          .experts = args.num_experts,
          .tile_rows = params.tile_rows,
          .scratch_bytes =
              kernels.RouteScratchBytes(assignments, args.num_experts)}));
  std::array<int32_t, kMaxTileRows> tail_classes = {};  // [n]: n-row tail
  for (int64_t n = 1; n < params.tile_rows; ++n) {
    TAILOR_ASSIGN_OR_RETURN(tail_classes[n], plan::TailClassOf(n, params));
  }
  return kernels.Route(
      internal::EngineOf(runtime),
      {.topk_ids = args.topk_ids.as<int32_t>(),
       .expert_map = args.expert_map ? args.expert_map->as<int32_t>() : nullptr,
       .map_size = args.expert_map ? args.expert_map->dims[0] : 0,
       .valid_tokens =
           args.valid_tokens ? args.valid_tokens->as<int32_t>() : nullptr,
       .tokens = tokens,
       .topk = k,
       .experts = args.num_experts,
       .tile_rows = params.tile_rows,
       .tail_classes = tail_classes.data(),
       .counts = d.i32(d.counts),
       .offsets = d.i32(d.offsets),
       .permutation = d.i32(d.permutation),
       .inverse = d.i32(d.inverse),
       .work = d.work_items(),
       .max_work = internal::MaxWorkItems(assignments, args.num_experts,
                                          params.tile_rows),
       .route_scratch = d.at(d.scratch),
       .stream = args.stream});
}

// The stats' plan_useful_rows / plan_executed_rows of a host plan.
void CountPlanRows(Runtime& runtime, const plan::PiecewisePlan& plan) {
  internal::Stats& stats = internal::EngineOf(runtime).stats();
  stats.Add(stats.plan_useful_rows, plan.accounting().useful_rows);
  stats.Add(stats.plan_executed_rows, plan.accounting().executed_rows);
}

}  // namespace

namespace {

absl::Status RouteUnguarded(Runtime& runtime, const RouteArgs& args,
                            Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.route"));
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  w->Invalidate();
  TAILOR_RETURN_IF_ERROR(ValidateRouteShapes(args, runtime.device()));
  const int64_t tokens = args.topk_ids.dims[0];
  const int64_t k = args.topk_ids.dims[1];
  TAILOR_ASSIGN_OR_RETURN(
      plan::PlanParams params,
      internal::ResolvePolicy(
          args.policy, kernels->DefaultTileRows(tokens * k, args.num_experts, tokens),
          kernels->MaxTileRows()));
  if (runtime.device().type == DeviceType::kCpu) {
    TAILOR_RETURN_IF_ERROR(RouteOnHost(args, params, *w));
    CountPlanRows(runtime, w->plan);
  } else {
    TAILOR_RETURN_IF_ERROR(RouteOnDevice(runtime, *kernels, args, params, *w));
    w->num_experts = args.num_experts;
    w->num_rows = tokens * k;
  }
  w->num_tokens = tokens;
  w->topk = k;
  w->tile_rows = params.tile_rows;
  w->id_limit = args.expert_map ? args.expert_map->dims[0] : args.num_experts;
  w->tuning = internal::EngineOf(runtime).shared_tuning();
  w->routed = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status Route(Runtime& runtime, const RouteArgs& args, Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc(
      "moe.route", [&] { return RouteUnguarded(runtime, args, ws); });
}

namespace {

absl::Status PlanRowsUnguarded(Runtime& runtime, const PlanRowsArgs& args,
                               Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.plan_rows"));
  if (runtime.device().type != DeviceType::kCpu) {
    return absl::UnimplementedError(absl::StrCat(
        "moe.plan_rows: host backends only (the ",
        BackendName(runtime.backend()), " backend routes on the device)"));
  }
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  w->Invalidate();
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectOperand("counts", args.counts, 1, DType::kI32, Device{}));
  const int64_t experts = args.counts.dims[0];
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectExpertCount("counts: dims[0] (E)", experts));
  const int32_t* counts = args.counts.as<int32_t>();
  int64_t total = 0, most = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (counts[e] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts[", e, "]: must be >= 0, got ", counts[e]));
    }
    total += counts[e];
    most = std::max<int64_t>(most, counts[e]);
  }
  if (total > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts: the sum ", total,
                     " exceeds 2147483647 (row indices are int32)"));
  }
  TAILOR_ASSIGN_OR_RETURN(
      plan::PlanParams params,
      internal::ResolvePolicy(args.policy,
                              kernels->DefaultTileRows(total, experts, most),
                              kernels->MaxTileRows()));
  GrowTo(w->counts, experts);
  std::copy_n(counts, experts, w->counts.begin());
  TAILOR_RETURN_IF_ERROR(PlanFromCounts(experts, params, *w));
  CountPlanRows(runtime, w->plan);
  w->tile_rows = params.tile_rows;
  w->tuning = internal::EngineOf(runtime).shared_tuning();
  w->routed = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status PlanRows(Runtime& runtime, const PlanRowsArgs& args,
                      Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc(
      "moe.plan_rows", [&] { return PlanRowsUnguarded(runtime, args, ws); });
}

}  // namespace moe
}  // namespace tailor
