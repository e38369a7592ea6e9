// moe::Workspace and the inspector: Route (token routing -> expert-sorted
// rows + piecewise plan) and PlanRows (plan for rows sorted elsewhere).
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ops/moe_checks.h"
#include "ops/moe_workspace.h"
#include "plan/bucket_policy.h"
#include "plan/piecewise_plan.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor {
namespace moe {

using internal::GrowTo;
using internal::MoeWorkspace;

// ---- Workspace --------------------------------------------------------------

Workspace::Workspace() : impl_(std::make_unique<MoeWorkspace>()) {}
Workspace::~Workspace() = default;
Workspace::Workspace(Workspace&& other) noexcept = default;
Workspace& Workspace::operator=(Workspace&& other) noexcept = default;

bool Workspace::routed() const { return impl_ != nullptr && impl_->routed; }
int64_t Workspace::num_tokens() const {
  return routed() ? impl_->num_tokens : 0;
}
int64_t Workspace::topk() const { return routed() ? impl_->topk : 0; }
int64_t Workspace::num_experts() const {
  return routed() ? impl_->num_experts : 0;
}
int64_t Workspace::num_rows() const { return routed() ? impl_->num_rows : 0; }

TensorRef Workspace::counts() const {
  if (!routed()) return TensorRef::Contiguous(nullptr, DType::kI32, {0});
  return TensorRef::Contiguous(impl_->counts.data(), DType::kI32,
                               {impl_->num_experts});
}

TensorRef Workspace::offsets() const {
  if (!routed()) return TensorRef::Contiguous(nullptr, DType::kI32, {0});
  return TensorRef::Contiguous(impl_->offsets.data(), DType::kI32,
                               {impl_->num_experts + 1});
}

TensorRef Workspace::permutation() const {
  if (!routed() || impl_->topk == 0)
    return TensorRef::Contiguous(nullptr, DType::kI32, {0});
  return TensorRef::Contiguous(impl_->permutation.data(), DType::kI32,
                               {impl_->num_rows});
}

TensorRef Workspace::inverse() const {
  if (!routed()) return TensorRef::Contiguous(nullptr, DType::kI32, {0, 0});
  return TensorRef::Contiguous(impl_->inverse.data(), DType::kI32,
                               {impl_->num_tokens, impl_->topk});
}

PlanSummary Workspace::plan() const {
  if (!routed()) return {};
  const plan::PiecewisePlan& p = impl_->plan;
  const int32_t core = p.core_range().size();
  return {.tile_rows = static_cast<int32_t>(p.tile_rows()),
          .core_tiles = core,
          .tail_pieces = static_cast<int32_t>(p.work().size()) - core,
          .variants = static_cast<int32_t>(p.variants().size()),
          .useful_rows = p.accounting().useful_rows,
          .executed_rows = p.accounting().executed_rows};
}

size_t Workspace::CapacityBytes() const {
  if (impl_ == nullptr) return 0;
  const MoeWorkspace& w = *impl_;
  return sizeof(int32_t) * (w.counts.capacity() + w.offsets.capacity() +
                            w.permutation.capacity() + w.inverse.capacity() +
                            w.local_ids.capacity()) +
         sizeof(int64_t) * w.extents.capacity() + w.rows_h.capacity() +
         w.rows_i.capacity() + w.plan.CapacityBytes();
}

std::string PlanSummary::ToString() const {
  return absl::StrCat("tile_rows=", tile_rows, " core=", core_tiles,
                      " tails=", tail_pieces, " variants=", variants,
                      " useful=", useful_rows, " executed=", executed_rows);
}

namespace {

absl::StatusOr<MoeWorkspace*> WorkspaceOf(Workspace& ws) {
  if (ws.impl() == nullptr) {
    return absl::FailedPreconditionError(
        "ws: this Workspace was moved from; assign a new one before use");
  }
  return ws.impl();
}

absl::StatusOr<plan::PlanParams> ToPlanParams(const RoutingPolicy& policy) {
  if (policy.tile_rows < 1 || policy.tile_rows > kMaxTileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.tile_rows: must be in [1, ", kMaxTileRows,
                     "], got ", policy.tile_rows));
  }
  plan::PlanParams params{.tile_rows = policy.tile_rows, .tail_policy = {}};
  switch (policy.tail) {
    case TailPolicy::kNextPowerOfTwo:
      params.tail_policy = plan::BucketPolicy::NextPowerOfTwo();
      return params;
    case TailPolicy::kExact:
      params.tail_policy = plan::BucketPolicy::Exact();
      return params;
    case TailPolicy::kFullTile: {
      TAILOR_ASSIGN_OR_RETURN(params.tail_policy,
                              plan::BucketPolicy::MultipleOf(policy.tile_rows));
      return params;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "policy.tail: not a TailPolicy value: ", static_cast<int>(policy.tail)));
}

// Checks the map's shape and entries (in [-1, num_experts)).
absl::Status ValidateExpertMap(const TensorRef& map, int64_t num_experts) {
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectOperand("expert_map", map, 1, DType::kI32));
  TAILOR_RETURN_IF_ERROR(internal::ExpectExpertCount(
      "expert_map: dims[0] (E_global)", map.dims[0]));
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

// Validates every id and writes its local expert (or -1) to w.local_ids.
absl::Status MapToLocalExperts(const RouteArgs& args, MoeWorkspace& w) {
  const TensorRef& ids = args.topk_ids;
  const int64_t k = ids.dims[1];
  const int64_t assignments = ids.dims[0] * k;
  const int32_t* map =
      args.expert_map ? args.expert_map->as<int32_t>() : nullptr;
  const int64_t id_limit =
      args.expert_map ? args.expert_map->dims[0] : args.num_experts;
  GrowTo(w.local_ids, assignments);
  const int32_t* id = ids.as<int32_t>();
  for (int64_t i = 0; i < assignments; ++i) {
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

absl::Status ReserveWorkspaceUnguarded(const WorkspaceLimits& limits,
                                       Workspace& ws) {
  auto out_of_range = [](absl::string_view field, int64_t lo, int64_t hi,
                         int64_t got) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limits.", field, ": must be in [", lo, ", ", hi, "], got ", got));
  };
  const int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  if (limits.topk < 1 || limits.topk > kMaxTopk)
    return out_of_range("topk", 1, kMaxTopk, limits.topk);
  if (limits.max_tokens < 0 || limits.max_tokens > kMaxIndex / limits.topk) {
    return out_of_range("max_tokens", 0, kMaxIndex / limits.topk,
                        limits.max_tokens);
  }
  if (limits.num_experts < 1 || limits.num_experts > kMaxExperts) {
    return out_of_range("num_experts", 1, kMaxExperts, limits.num_experts);
  }
  if (limits.hidden < 0 || limits.hidden > kMaxModelDim) {
    return out_of_range("hidden", 0, kMaxModelDim, limits.hidden);
  }
  if (limits.intermediate < 0 || limits.intermediate > kMaxModelDim) {
    return out_of_range("intermediate", 0, kMaxModelDim, limits.intermediate);
  }
  if (limits.dtype != DType::kBF16 && limits.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limits.dtype: must be bf16 or f32, got ", DTypeName(limits.dtype)));
  }
  TAILOR_ASSIGN_OR_RETURN(plan::PlanParams params, ToPlanParams(limits.policy));
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  const int64_t assignments = limits.max_tokens * limits.topk;  // R <= T * k
  const size_t element = DTypeSize(limits.dtype);
  GrowTo(w->counts, limits.num_experts);
  GrowTo(w->offsets, limits.num_experts + 1);
  GrowTo(w->extents, limits.num_experts);
  GrowTo(w->permutation, assignments);
  GrowTo(w->inverse, assignments);
  GrowTo(w->local_ids, assignments);
  GrowTo(w->rows_h, static_cast<size_t>(assignments * limits.hidden) * element);
  GrowTo(w->rows_i,
         static_cast<size_t>(assignments * limits.intermediate) * element);
  const int64_t groups = std::max(w->plan_reserved_groups, limits.num_experts);
  const int64_t rows = std::max(w->plan_reserved_rows, assignments);
  TAILOR_RETURN_IF_ERROR(w->plan.Reserve(groups, rows, params));
  w->plan_reserved_groups = groups;
  w->plan_reserved_rows = rows;
  w->plan_reserved_tile_rows = params.tile_rows;
  return absl::OkStatus();
}

absl::Status RouteUnguarded(Runtime& runtime, const RouteArgs& args,
                            Workspace& ws) {
  TAILOR_RETURN_IF_ERROR(internal::RequireCpuBackend(runtime, "moe.route"));
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  w->Invalidate();
  TAILOR_ASSIGN_OR_RETURN(plan::PlanParams params, ToPlanParams(args.policy));
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectOperand("topk_ids", args.topk_ids, 2, DType::kI32));
  const int64_t tokens = args.topk_ids.dims[0];
  const int64_t k = args.topk_ids.dims[1];
  TAILOR_RETURN_IF_ERROR(internal::ExpectTopk("topk_ids", tokens, k));
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectExpertCount("num_experts", args.num_experts));
  if (args.expert_map) {
    TAILOR_RETURN_IF_ERROR(
        ValidateExpertMap(*args.expert_map, args.num_experts));
  }
  TAILOR_RETURN_IF_ERROR(MapToLocalExperts(args, *w));

  const int64_t assignments = tokens * k;
  GrowTo(w->counts, args.num_experts);
  std::fill_n(w->counts.begin(), args.num_experts, 0);
  for (int64_t i = 0; i < assignments; ++i) {
    if (w->local_ids[i] >= 0) ++w->counts[w->local_ids[i]];
  }
  TAILOR_RETURN_IF_ERROR(PlanFromCounts(args.num_experts, params, *w));
  SortAssignments(assignments, *w);
  w->num_tokens = tokens;
  w->topk = k;
  w->routed = true;
  return absl::OkStatus();
}

absl::Status PlanRowsUnguarded(Runtime& runtime, const PlanRowsArgs& args,
                               Workspace& ws) {
  TAILOR_RETURN_IF_ERROR(internal::RequireCpuBackend(runtime, "moe.plan_rows"));
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  w->Invalidate();
  TAILOR_ASSIGN_OR_RETURN(plan::PlanParams params, ToPlanParams(args.policy));
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectOperand("counts", args.counts, 1, DType::kI32));
  const int64_t experts = args.counts.dims[0];
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectExpertCount("counts: dims[0] (E)", experts));
  const int32_t* counts = args.counts.as<int32_t>();
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (counts[e] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts[", e, "]: must be >= 0, got ", counts[e]));
    }
    total += counts[e];
  }
  if (total > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts: the sum ", total,
                     " exceeds 2147483647 (row indices are int32)"));
  }
  GrowTo(w->counts, experts);
  std::copy_n(counts, experts, w->counts.begin());
  TAILOR_RETURN_IF_ERROR(PlanFromCounts(experts, params, *w));
  w->routed = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status ReserveWorkspace(const WorkspaceLimits& limits, Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc("moe.reserve_workspace", [&] {
    return ReserveWorkspaceUnguarded(limits, ws);
  });
}

absl::Status Route(Runtime& runtime, const RouteArgs& args, Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc(
      "moe.route", [&] { return RouteUnguarded(runtime, args, ws); });
}

absl::Status PlanRows(Runtime& runtime, const PlanRowsArgs& args,
                      Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc(
      "moe.plan_rows", [&] { return PlanRowsUnguarded(runtime, args, ws); });
}

}  // namespace moe
}  // namespace tailor
