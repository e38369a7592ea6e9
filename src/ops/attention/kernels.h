// ops/attention/kernels.h — the decode-attention kernel family: what the
// attention:: op fronts ask of a backend.
//
// The op front (src/ops/attention/) validates, plans and calls this
// interface; each backend implements it next to its templates
// (src/backends/<name>/attention/, templates/<name>/attention/) and
// returns it from Backend::decode_kernels(). The op front never names a
// template, a generator or a launch shape.
//
// The backend shapes the plan: PlanConfig says how many workers its decode
// launch has (CUDA: CTAs, one per SM; CPU: thread-pool tasks), the tile its
// kernels step through the KV cache by (pieces begin at multiples of it) and
// what one work item costs besides its tokens. plan::BuildDecodePlan then
// balances the work over exactly those workers.
//
// Two kinds of backends:
//   - host-memory backends (the CPU): the kernels read the host plan and
//     host partial buffers; Decode launches the pieces, then the merge.
//   - device-memory backends (CUDA): the plan is copied into device buffers
//     of the workspace (UploadPlan); Decode launches one kernel over
//     num_workers CTAs that reads the work list there, merges split pairs
//     in the same launch (the last piece to finish merges) and records bad
//     device data in the backend's scratch (InitScratch / TakeErrors).
//
// Nothing here checks arguments: callers pass validated shapes, strides
// and pointers. Every call is asynchronous on `stream` on device backends
// (no allocation, no sync) and synchronous on the CPU.
#ifndef TAILOR_OPS_ATTENTION_KERNELS_H_
#define TAILOR_OPS_ATTENTION_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/engine.h"
#include "plan/decode_plan.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The compiled-in quantities of a decode kernel (plus Hkv, which sizes the
// plan but not the kernel).
struct DecodeShape {
  DType dtype = DType::kBF16;  // q, k, v, out
  int64_t head_dim = 0;        // D
  int64_t group = 0;           // Hq / Hkv
  int64_t page_size = 0;
  int64_t num_kv_heads = 0;
  friend bool operator==(const DecodeShape&, const DecodeShape&) = default;
};

// How the backend wants its plans cut (plan::DecodePlanParams minus the
// shape's own fields).
struct DecodePlanConfig {
  int32_t num_workers = 0;
  int32_t tile_tokens = 0;
  int32_t item_cost_tokens = 0;
  int32_t cut_workers = 0;  // 0: num_workers
  // KV heads whose items run together (plan::DecodePlanParams::head_group).
  // For no lengths (a workspace reservation): the largest any plan of the
  // shape may get, which sizes the work list and the partial slots.
  int32_t head_group = 1;
  bool head_group_always = false;  // plan::DecodePlanParams's
  // Workers come in clusters of this many (plan::DecodePlanParams's; 0:
  // none). Fixed per workspace, like num_workers: the launch's shape.
  int32_t cluster_workers = 0;
  // The backend's own bits for this plan's launch (CUDA: kDecodeLaunch*,
  // templates/cuda/attention/decode_params.h). Device backends get them uploaded
  // after the plan's worker_begin, so a captured graph follows each plan.
  int32_t launch_flags = 0;
  // Bits added to launch_flags when the built plan groups heads (its
  // params().head_group > 1: the planner decides, see head_group).
  int32_t head_group_flags = 0;
  // Bits added to launch_flags when the built plan's split pairs merge in
  // clusters (plan::DecodePlan::cluster_merges).
  int32_t cluster_flags = 0;
};

// Where one RunDecode finds its plan and scratch.
struct DecodeWorkRef {
  // Host-memory backends: the plan and partial buffers on the host.
  const plan::DecodePlan* host_plan = nullptr;
  // Both kinds: partial results of split pairs.
  float* partial_out = nullptr;  // [max_partials, group, D]
  float* partial_lse = nullptr;  // [max_partials, group]
  // Device-memory backends: the uploaded plan and the backend's scratch.
  const plan::DecodeWorkItem* items = nullptr;        // [max_items]
  const int32_t* worker_begin = nullptr;              // [num_workers + 1]
  const plan::DecodeWorkItem* first_items = nullptr;  // [num_workers]
  void* scratch = nullptr;   // ScratchBytes(max_partials)
  int64_t max_partials = 0;  // slots the scratch holds
  int32_t num_workers = 0;
  int32_t cluster_workers = 0;  // the plan's (DecodePlanConfig)
};

struct DecodeLaunch {
  DecodeShape shape;
  const void* q = nullptr;  // [B', Hq, D] (with q_rows: [rows, Hq, D])
  int64_t q_stride_b = 0, q_stride_h = 0;
  // [B'] device: the q / out / lse row of sequence b, or null (row b). Set
  // by RunRagged for its decode rows on backends whose RaggedPlanConfig
  // routes them here (CUDA); others refuse it with Internal.
  const int32_t* q_rows = nullptr;
  // [num_pages, page_size, Hkv, D]: strides of dims 0..2 (dim 3 is 1).
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int64_t k_strides[3] = {};
  int64_t v_strides[3] = {};
  int64_t num_pages = 0;
  const int32_t* block_table = nullptr;  // [B', max_pages]
  int64_t block_table_stride = 0;
  int64_t max_pages = 0;
  // [B' + 1] device, or null: FlashInfer's kv_indptr, with block_table its
  // kv_indices [nnz] (max_pages = nnz). Set by RunRagged for its decode
  // rows on CUDA; others refuse it with Internal.
  const int32_t* page_indptr = nullptr;
  const int32_t* seq_lens = nullptr;  // [B'] (device memory on GPUs)
  void* out = nullptr;                // [B', Hq, D]
  int64_t out_stride_b = 0, out_stride_h = 0;
  float* lse = nullptr;  // [B', Hq] or null
  int64_t lse_stride_b = 0;
  float sm_scale = 0;
  float soft_cap = 0;  // 0: none
  DecodeWorkRef work;
  void* stream = nullptr;
};

// Bad device data one or more RunDecodes met (and dropped) since the
// errors were last taken. Positions are the lowest ones.
struct DecodeErrors {
  struct Bad {
    int64_t position;  // see each field
    int32_t value;
  };
  // position = b * max_pages + j, value = block_table[b, j]: outside
  // [0, num_pages).
  std::optional<Bad> bad_page;
  // position = b, value = seq_lens[b] on the device: differs from the plan.
  std::optional<Bad> bad_seq_len;
  // position = b, value = the pages its planned length needs: more than the
  // block table's max_pages (a graph replayed with a longer plan).
  std::optional<Bad> too_many_pages;
};

class DecodeKernels {
 public:
  virtual ~DecodeKernels() = default;

  // How a plan of `seq_lens` (host; empty when reserving) for `shape` on a
  // workspace of `bucket` sequences (DecodeLimits::max_batch) must be cut.
  // num_workers, the launch, may depend on the bucket only, so that every
  // plan on one workspace launches the same grid and a captured graph
  // replays any of them; it must not shrink as the bucket grows (a
  // reservation holds every smaller bucket's plans). cut_workers may narrow
  // a plan by its lengths. Unimplemented when no kernel of this backend
  // serves the shape.
  virtual absl::StatusOr<DecodePlanConfig> PlanConfig(
      const DecodeShape& shape, int64_t bucket,
      absl::Span<const int32_t> seq_lens) = 0;

  // ---- device memory (optional: device-memory backends) -------------------
  // Bytes of opaque scratch (merge counters, error words) for up to
  // `max_partials` partial slots. Defaults to 0.
  virtual int64_t ScratchBytes(int64_t max_partials) const { return 0; }
  // Prepares fresh scratch (counters zero, no error). Defaults to
  // Unimplemented.
  virtual absl::Status InitScratch(Engine& engine, void* scratch,
                                   int64_t max_partials, void* stream);
  // Enqueues a copy of `bytes` host bytes at `host` to device `device` on
  // `stream`; `host` may be reused when it returns. Defaults to
  // Unimplemented.
  virtual absl::Status UploadPlan(Engine& engine, const void* host,
                                  void* device, size_t bytes, void* stream);
  // Reads the error record of `scratch` and clears it; waits for `stream`.
  // Defaults to Unimplemented.
  virtual absl::StatusOr<DecodeErrors> TakeErrors(Engine& engine, void* scratch,
                                                  int64_t max_partials,
                                                  void* stream);

  // ---- the executor (required) ----------------------------------------------
  // Runs every piece of the plan and merges split pairs.
  virtual absl::Status Decode(Engine& engine, const DecodeLaunch& launch) = 0;
};

// The decode kernels of `runtime`'s backend; Unimplemented naming `op`
// (e.g. "attention.run_decode") when the backend has none.
absl::StatusOr<DecodeKernels*> DecodeKernelsOf(Runtime& runtime,
                                               absl::string_view op);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_KERNELS_H_
