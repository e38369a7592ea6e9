// ops/attention/ragged_kernels.h — the ragged-attention kernel family: what
// attention::PlanRagged / RunRagged ask of a backend.
//
// The op front (src/ops/attention/ragged.cc) validates, plans with
// plan::BuildAttentionPlan and calls this interface; each backend implements
// it next to its templates (src/backends/<name>/attention/ragged_kernels.*)
// and returns it from Backend::ragged_kernels(). The op front never names a
// template, a generator or a launch shape.
//
// The backend shapes the plan: PlanConfig returns the planner's parameters
// minus the layer's own (its tile rows, how many query heads it packs into
// a tile's rows, the KV block its kernels step by, its workers and costs).
//
// Two kinds of backends, as for decode (ops/attention/kernels.h):
//   - host-memory backends (the CPU) read the host plan and host partial
//     buffers; Run launches the work items, then the merge of split tiles.
//   - device-memory backends (CUDA) get the plan copied into the device
//     workspace (UploadPlan) and record bad device data in their scratch.
//
// Nothing here checks arguments: callers pass validated shapes, strides and
// pointers. Every call is asynchronous on `stream` on device backends (no
// allocation, no sync) and synchronous on the CPU.
#ifndef TAILOR_OPS_ATTENTION_RAGGED_KERNELS_H_
#define TAILOR_OPS_ATTENTION_RAGGED_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine.h"
#include "plan/attention_plan.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The static quantities of one ragged-attention layer (what kernels and
// plans are built for). Lengths and batch sizes are never here.
struct RaggedShape {
  DType dtype = DType::kBF16;  // q, k, v, out
  int64_t head_dim = 0;        // D
  int64_t num_qo_heads = 0;    // Hq
  int64_t num_kv_heads = 0;    // Hkv
  int64_t page_size = 0;
  bool causal = true;
  int64_t window_left = -1;  // -1: no sliding window
  int64_t group() const { return num_qo_heads / num_kv_heads; }
  friend bool operator==(const RaggedShape&, const RaggedShape&) = default;
};

// How the backend wants its plans cut: plan::AttentionPlanParams minus the
// shape's own fields (heads, causal, window).
struct RaggedPlanConfig {
  int32_t head_pack = 1;
  int32_t tile_rows = 0;
  int32_t kv_block = 0;
  int32_t num_workers = 0;
  int32_t item_cost = 0;
  int32_t masked_block_extra = 0;
  int32_t min_piece_blocks = 4;
  int32_t max_pieces = 16;
  // Device backends: run q_len = 1 rows on the backend's paged-decode
  // kernels (ops/attention/kernels.h) instead of query tiles, where those
  // serve the shape (the workspace then holds a decode plan beside the tiles).
  bool decode_rows = false;
};

// Where one RunRagged finds its plan and scratch.
struct RaggedWorkRef {
  const plan::AttentionPlan* host_plan = nullptr;  // both kinds
  float* partial_out = nullptr;  // [max_partials, tile_rows, D]
  float* partial_lse = nullptr;  // [max_partials, tile_rows]
  // Device-memory backends: the uploaded plan and the backend's scratch.
  const plan::AttentionWorkItem* items = nullptr;           // [max_items]
  const int32_t* worker_begin = nullptr;                    // [num_workers + 1]
  const plan::AttentionMergeGroup* merge_groups = nullptr;  // [max_partials]
  const int32_t* num_merge_groups = nullptr;                // [1]
  void* scratch = nullptr;
  int64_t max_partials = 0;
};

struct RaggedLaunch {
  RaggedShape shape;
  RaggedPlanConfig config;  // the plan's
  const void* q = nullptr;  // [Σq', Hq, D]
  int64_t q_rows = 0;       // Σq' (q.dims[0], = out.dims[0])
  int64_t q_stride_token = 0, q_stride_head = 0;
  // [num_pages, page_size, Hkv, D]: strides of dims 0..2 (dim 3 is 1).
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int64_t k_strides[3] = {};
  int64_t v_strides[3] = {};
  int64_t num_pages = 0;
  // Pages of sequence b: block_table[page_row(b) + j], page_row(b) =
  // page_indptr ? page_indptr[b] : b * block_table_stride.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int64_t max_pages = 0;  // block_table.dims[1] (rank 1: dims[0])
  const int32_t* page_indptr = nullptr;  // [B' + 1] or null
  // [B'] the caller's KV lengths, or null. The CUDA and HIP tile kernels
  // compare kv_lens[b] with the planned length and record a mismatch
  // (RaggedErrors::bad_kv_len); their tiles attend the planned length.
  // Host kernels ignore it (the front checks it).
  const int32_t* kv_lens = nullptr;
  void* out = nullptr;  // [Σq', Hq, D]
  int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;  // [Σq', Hq] or null
  int64_t lse_stride_token = 0;
  float sm_scale = 0;
  float soft_cap = 0;  // 0: none
  RaggedWorkRef work;
  void* stream = nullptr;
};

// Bad device data RunRagged met since the errors were last taken, the
// lowest positions.
struct RaggedErrors {
  struct Bad {
    int64_t position;
    int32_t value;
  };
  // position = b * max_pages + j, value = the page id (dropped).
  std::optional<Bad> bad_page;
  // position = b, value = kv_lens[b] on the device: differs from the plan.
  std::optional<Bad> bad_kv_len;
};

class RaggedKernels {
 public:
  virtual ~RaggedKernels() = default;

  // How plans for `shape` must be cut. num_workers may depend on the shape
  // only (every plan of a workspace launches the same grid, so a captured
  // graph replays any of them). Unimplemented naming the field when no
  // kernel of this backend serves the shape.
  virtual absl::StatusOr<RaggedPlanConfig> PlanConfig(
      const RaggedShape& shape) = 0;

  // ---- device memory (optional: device-memory backends) -------------------
  // Bytes of opaque scratch (error words). Defaults to 0.
  virtual int64_t ScratchBytes() const { return 0; }
  // Prepares fresh scratch. Defaults to Unimplemented.
  virtual absl::Status InitScratch(Engine& engine, void* scratch, void* stream);
  // Enqueues a copy of `bytes` host bytes to device `device` on `stream`.
  // Defaults to Unimplemented.
  virtual absl::Status UploadPlan(Engine& engine, const void* host,
                                  void* device, size_t bytes, void* stream);
  // Reads and clears the error record of `scratch`; waits for `stream`.
  // Defaults to Unimplemented.
  virtual absl::StatusOr<RaggedErrors> TakeErrors(Engine& engine, void* scratch,
                                                  void* stream);
  // Whether work enqueued on `stream` now may be replayed later (a graph
  // capture): RunRagged then launches a part of the plan with no work too,
  // since a replayed plan may have some; otherwise it skips it. Defaults to
  // true (always launch).
  virtual bool MayReplay(Engine& engine, void* stream) { return true; }

  // ---- the executor (required) ---------------------------------------------
  // Runs every work item of the plan, then merges split tiles.
  virtual absl::Status Run(Engine& engine, const RaggedLaunch& launch) = 0;
};

// The ragged-attention kernels of `runtime`'s backend; Unimplemented naming
// `op` (e.g. "attention.run_ragged") when the backend has none.
absl::StatusOr<RaggedKernels*> RaggedKernelsOf(Runtime& runtime,
                                               absl::string_view op);

// The planner's parameters for `shape` cut as `config` says.
plan::AttentionPlanParams RaggedPlanParamsFor(const RaggedShape& shape,
                                              const RaggedPlanConfig& config);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_RAGGED_KERNELS_H_
