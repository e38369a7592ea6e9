// ops/moe/workspace.h — what a tailor::moe::Workspace holds.
//
// The op fronts (moe_route.cc, moe_ops.cc, moe_experts.cc) fill and read this
// struct; the public Workspace only exposes views of it. Two storages:
//   - host (host-memory backends): the std::vectors below. Every buffer only
//     grows: logical sizes live in the scalar fields, so a smaller step after
//     a larger one neither frees nor re-zeroes memory.
//   - device (device-memory backends): `device`, one block of device memory
//     reserved once (ops/moe/device_workspace.h) and cut into buffers.
#ifndef TAILOR_OPS_MOE_WORKSPACE_H_
#define TAILOR_OPS_MOE_WORKSPACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/stats.h"
#include "core/tuning.h"
#include "ops/moe/device_workspace.h"
#include "ops/moe/kernels.h"
#include "plan/piecewise_plan.h"
#include "tailor/ops/moe.h"

namespace tailor::internal {

struct MoeWorkspace {
  // ---- routing (valid when `routed`) ----------------------------------------
  bool routed = false;
  int64_t num_tokens = 0;   // T (0 after PlanRows)
  int64_t topk = 0;         // k (0 after PlanRows)
  int64_t num_experts = 0;  // E
  int64_t num_rows = 0;     // R (host); its bound T * k (device)
  int64_t tile_rows = 0;    // of the plan
  // Ids of the last Route are checked against [0, id_limit) (E, or the
  // expert_map length): the text of device routing errors.
  int64_t id_limit = 0;

  // ---- host storage ---------------------------------------------------------
  std::vector<int32_t> counts;       // [>= E]
  std::vector<int32_t> offsets;      // [>= E + 1]
  std::vector<int32_t> permutation;  // [>= R]
  std::vector<int32_t> inverse;      // [>= T * k]
  std::vector<int32_t> local_ids;    // [>= T * k] scratch: local expert or -1
  std::vector<int64_t> extents;      // [>= E] scratch: planner input
  plan::PiecewisePlan plan;
  // The plan has been Reserve()d for this many groups and rows (and for
  // every tail class of its params), so a step within both never allocates.
  int64_t plan_reserved_groups = -1;
  int64_t plan_reserved_rows = -1;
  int64_t plan_reserved_tile_rows = -1;
  // Experts intermediates, raw bytes of the activation dtype.
  std::vector<unsigned char> rows_h;  // [R, H]: packed input, then gemm2 out
  std::vector<unsigned char> rows_i;  // [R, I]: silu_and_mul(gemm1)
  // FP8 Experts intermediates: e4m3 rows and their f32 scales (block mode:
  // [H/128, R] / [I/128, R]; per channel: [R]), and the identity order the
  // per-tensor / per-channel modes requantize gemm1's rows with.
  std::vector<uint8_t> fp8_rows_h;  // [R, H] quantized packed input
  std::vector<uint8_t> fp8_rows_i;  // [R, I] quantized down-projection input
  std::vector<float> fp8_scales_h;
  std::vector<float> fp8_scales_i;
  std::vector<int32_t> identity;  // [R] 0, 1, ..., R - 1

  // The last two GroupedGemm configurations since the last Route, oldest
  // first (PlanSummary::gemms). GroupedGemm takes the workspace const and
  // may run on several threads at once: a diagnostic, under its own lock.
  mutable absl::Mutex gemms_mu;
  mutable GemmConfig gemms[2] ABSL_GUARDED_BY(gemms_mu);
  mutable int num_gemms ABSL_GUARDED_BY(gemms_mu) = 0;

  // ---- device storage (device-memory backends) -----------------------------
  std::optional<MoeDeviceBuffers> device;

  // This workspace's bytes in its runtime's Stats::workspace_bytes gauge.
  GaugeShare accounted_bytes;
  // The tuning keys of the runtime that routed it last (PlanSummary).
  std::shared_ptr<const Tuning> tuning;

  void Invalidate() {
    routed = false;
    num_tokens = topk = num_experts = num_rows = 0;
    absl::MutexLock lock(&gemms_mu);
    num_gemms = 0;
  }

  // Keeps `config` as the newest of the last two (a launch that ran no
  // kernel, kernel "", is not kept).
  void RecordGemm(const GemmConfig& config) const {
    if (config.kernel[0] == '\0') return;
    absl::MutexLock lock(&gemms_mu);
    if (num_gemms == 2) gemms[0] = gemms[1];
    gemms[num_gemms == 2 ? 1 : num_gemms++] = config;
  }

  // The recorded configurations, oldest first.
  std::vector<GemmConfig> Gemms() const {
    absl::MutexLock lock(&gemms_mu);
    return std::vector<GemmConfig>(gemms, gemms + num_gemms);
  }
};

// The plan of the last Route on `w`: its host plan, or its device work list.
inline MoePlanRef PlanRefOf(const MoeWorkspace& w) {
  if (!w.device) return {.host = &w.plan};
  return {.device_work = w.device->work_items(),
          .route_scratch = w.device->at(w.device->scratch),
          .max_work = MaxWorkItems(w.num_rows, w.num_experts, w.tile_rows)};
}

// Grows `buffer` to at least `size` elements; never shrinks. Throws
// std::bad_alloc when memory runs out: callers run under
// ResourceExhaustedOnBadAlloc.
template <typename T>
void GrowTo(std::vector<T>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

// Runs `body` (an entry that grows Workspace buffers sized by the caller's
// shapes) and turns a failed allocation into ResourceExhausted naming `op`:
// no std::bad_alloc crosses the API.
template <typename Body>
absl::Status ResourceExhaustedOnBadAlloc(absl::string_view op, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(op,
                   ": cannot allocate the Workspace's buffers for these "
                   "shapes (out of memory)"));
}

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_WORKSPACE_H_
