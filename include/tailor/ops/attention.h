// tailor/ops/attention.h — paged-KV attention: plan, then run. Decode
// (PlanDecode / RunDecode, one query token per sequence) and ragged
// attention (PlanRagged / RunRagged, below: any mix of prefill, chunked
// prefill over cached prefixes, speculative and decode rows).
//
// One decode step attends each of B queries (one new token per sequence,
// Hq heads of D elements) to its sequence's KV cache, which lives in fixed-
// size pages of page_size tokens scattered through a cache tensor; a block
// table lists each sequence's pages. Sequence lengths differ by orders of
// magnitude, so the work is planned first (as in FlashInfer):
//
//   PlanDecode  host seq_lens [B] -> a work list in the DecodeWorkspace: the
//               (sequence, KV head) pairs cut into pieces so that every
//               worker (CUDA: one CTA per SM; CPU: a thread-pool task) reads
//               the same number of KV bytes — balanced for one long sequence
//               among many short ones and for B = 1. Pieces of a split pair
//               are merged by log-sum-exp. Plan once per step; every layer
//               of the step reuses the plan.
//   RunDecode   q, k/v caches, block table, device seq_lens -> out (and the
//               log-sum-exp): never allocates, never syncs, launches on the
//               caller's stream, so it can be captured in a CUDA graph.
//
// A decode step is the ragged step (PlanRagged / RunRagged, below) whose
// every sequence has q_len = 1 (q_indptr = 0..B, kv_lens = seq_lens); these
// entry points keep their own arguments and messages and run it as the
// ragged step's decode rows: the same planner and kernel, one launch.
//
// Kernels are specialized on dtype, head_dim, the GQA group size
// (Hq / Hkv) and the page size — never on B or lengths: a model needs one
// decode kernel (CUDA) or two (CPU: pieces and merge), whatever the batch.
//
// Conventions:
// - Shapes: B sequences; Hq query heads; Hkv KV heads with Hq % Hkv == 0
//   and group = Hq / Hkv in [1, kMaxGroup] (MHA, GQA, MQA); head_dim D in
//   {64, 128, 256}; page_size in [1, kMaxPageSize]; dtype bf16 or f16 for
//   q, k, v and out. Query head j attends KV head j / group.
// - KV layout by strides: k_cache and v_cache are separate [num_pages,
//   page_size, Hkv, D] views; the last dim must be contiguous, the others
//   may have any stride, so both common layouts are plain views:
//     NHD (vLLM)           memory [pages, page_size, Hkv, D]: contiguous
//     HND (FlashInfer opt) memory [pages, Hkv, page_size, D]: strides
//                          {Hkv*page_size*D, D, page_size*D, 1}
//   On a GPU every stride is a multiple of 8 elements and data is 16-byte
//   aligned (16-byte loads, TMA). q and out may be strided the same way
//   ([B, Hq, D], last dim contiguous), e.g. q sliced from a fused qkv.
// - Token t of sequence b lives in page block_table[b, t / page_size], at
//   slot t % page_size. Only entries of pages that hold tokens < seq_len are
//   read; the rest of the row may be anything.
// - Softmax: s = sm_scale * q.k; with logits_soft_cap c > 0, s = c *
//   tanh(s / c) (Gemma 2). out = softmax(s) . v in f32, rounded to the
//   dtype; lse = log(sum exp(s)) (natural log, f32). A sequence of length 0
//   gets out = 0 and lse = -inf.
// - Errors: InvalidArgument naming the argument and the rule, checked
//   before anything runs (a rejected call writes nothing); FailedPrecondition
//   for a workspace that was not planned (or, on a GPU, not reserved, or too
//   small); Unimplemented when the backend has no decode kernels.
// - Host-memory backends (cpu): calls are synchronous and the host checks
//   tensor contents (block table entries, seq_lens against the plan).
//   Device backends (cuda): calls are asynchronous on `stream`, the host
//   never reads device tensors. Contents are checked on the device: a block
//   table entry outside [0, num_pages) drops its page (its tokens are not
//   attended; nothing out of bounds is read), a device seq_lens[b] that
//   differs from the planned length attends min(planned, device) tokens;
//   both are recorded in the workspace and reported by
//   DecodeWorkspace::TakeErrors with the host check's text.
// - Device memory: ReserveDecodeWorkspace allocates the workspace once for
//   a batch bucket (or BindDecodeWorkspace borrows caller memory); plans
//   larger than the reservation fail with FailedPrecondition.
// - CUDA graphs: plan outside the graph (PlanDecode copies the work list
//   into the workspace on `stream`), capture RunDecode once per batch
//   bucket, replay after each step's PlanDecode with new lengths and block
//   tables in the same buffers. The kernel's grid does not depend on B, and
//   a replay may run any plan whose batch is at most the q.dims[0] captured.
//   PlanDecode and RunDecode must be ordered on one stream.
// - A DecodeWorkspace is not thread-safe: one per thread (or stream).
// - Names follow every family's scheme (tailor/ops/moe.h): the state of a
//   kind of step is attention::<Kind>Workspace (DecodeWorkspace,
//   RaggedWorkspace), sized by Reserve<Kind>Workspace, <Kind>WorkspaceBytes,
//   Bind<Kind>Workspace and checked by <Kind>Workspace::TakeErrors; the
//   workspace is the last argument before the stream. In C:
//   tailor_attention_{decode,ragged}_workspace_<verb>,
//   tailor_attention_decode_{plan,run} and
//   tailor_attention_ragged_{plan,plan_flashinfer,run} (tailor/c_api.h).
//
// Example (every step; plan once, run every layer; the whole program, with
// a reference check, is examples/04_paged_decode.cc, built and run in CI):
//   attention::DecodeWorkspace ws;            // keep it across steps
//   TAILOR_RETURN_IF_ERROR(attention::ReserveDecodeWorkspace(runtime,
//       {.max_batch = 256, .num_qo_heads = 32, .num_kv_heads = 8,
//        .head_dim = 128, .page_size = 16, .dtype = DType::kBF16}, ws));
//   TAILOR_RETURN_IF_ERROR(attention::PlanDecode(runtime,
//       {.seq_lens = TensorRef::Contiguous(host_lens, DType::kI32, {B}),
//        .page_size = 16, .num_qo_heads = 32, .num_kv_heads = 8,
//        .head_dim = 128, .dtype = DType::kBF16, .stream = stream}, ws));
//   for (int layer = 0; layer < layers; ++layer) {
//     TAILOR_RETURN_IF_ERROR(attention::RunDecode(runtime,
//         {.q = q, .k_cache = k[layer], .v_cache = v[layer],
//          .block_table = block_table, .seq_lens = device_lens, .out = out,
//          .stream = stream}, ws));
//   }
//   // at a sync point of your choice:
//   TAILOR_RETURN_IF_ERROR(ws.TakeErrors(runtime, stream));
#ifndef TAILOR_OPS_ATTENTION_H_
#define TAILOR_OPS_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor {
namespace internal {
struct DecodeWorkspaceImpl;
struct RaggedWorkspaceImpl;
}  // namespace internal

namespace attention {

// Limits of the compiled-in quantities.
inline constexpr int64_t kMaxGroup = 16;      // Hq / Hkv
inline constexpr int64_t kMaxPageSize = 256;  // tokens per page
inline constexpr int64_t kMaxHeads = 1024;    // Hq
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 30;
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;

// The static quantities of one attention layer: what kernels are compiled
// for, and what ReserveDecodeWorkspace sizes for.
struct DecodeLimits {
  int64_t max_batch = 0;       // B of the largest plan (the batch bucket)
  int64_t num_qo_heads = 0;    // Hq
  int64_t num_kv_heads = 0;    // Hkv
  int64_t head_dim = 0;        // D: 64, 128 or 256
  int64_t page_size = 0;       // [1, kMaxPageSize]
  DType dtype = DType::kBF16;  // bf16 or f16
};

// What the last PlanDecode planned, for logs, tests and benches.
struct DecodePlanSummary {
  int32_t batch = 0;
  int32_t workers = 0;          // CUDA: CTAs of the grid; CPU: tasks
  int32_t busy_workers = 0;     // workers with work
  int32_t items = 0;            // pieces run (whole pairs included)
  int32_t split_pairs = 0;      // (sequence, KV head) pairs in pieces
  int32_t partials = 0;         // pieces merged by log-sum-exp
  int64_t tokens = 0;           // KV tokens read, times KV heads
  int64_t max_worker_cost = 0;  // tokens of the busiest worker (+ overheads)
  double mean_worker_cost = 0;  // over all workers
  // KV heads whose pieces run together on one worker (CUDA sm_90a: one TMA
  // copy loads a page of 4 heads); 1: each (sequence, KV head) on its own.
  int32_t head_group = 1;
  // CUDA sm_90a: workers launch in clusters of this many CTAs, and a split
  // pair whose pieces all run in one cluster merges in its shared memory
  // (small batch buckets); 0: no clusters.
  int32_t cluster_workers = 0;
  std::string ToString() const;  // "batch=1 workers=132/132 items=140 ..."
};

// Caller-owned state of decode steps: the plan of the last PlanDecode and,
// on device backends, the device memory the kernels use (work list, partial
// results, error words). Movable, not copyable; a moved-from workspace fails
// every call with FailedPrecondition.
class DecodeWorkspace {
 public:
  DecodeWorkspace();
  ~DecodeWorkspace();
  DecodeWorkspace(DecodeWorkspace&& other) noexcept;
  DecodeWorkspace& operator=(DecodeWorkspace&& other) noexcept;
  DecodeWorkspace(const DecodeWorkspace&) = delete;
  DecodeWorkspace& operator=(const DecodeWorkspace&) = delete;

  // True after a successful PlanDecode; false initially, after a failed one
  // and once moved from.
  bool planned() const;
  // B of the last plan (0 when not planned).
  int64_t batch() const;
  // Where the workspace's buffers live: the host, or the device of the
  // runtime given to ReserveDecodeWorkspace / BindDecodeWorkspace.
  Device device() const;
  DecodePlanSummary plan() const;
  // Bytes of buffers held (host and device); constant across steps that fit.
  size_t CapacityBytes() const;

  // Reports the bad device data RunDecode met (and dropped) since the last
  // call, lowest position first, with the text of the host check, e.g.
  // InvalidArgument("block_table[3,7]: page id 9999 is outside [0, 512)")
  // or InvalidArgument("seq_lens[2]: 17 differs from 16, the length
  // PlanDecode planned"), and forgets it. Positions are read with the last plan
  // and run. Waits for `stream`. OkStatus on host backends, whose RunDecode
  // reports errors itself.
  absl::Status TakeErrors(Runtime& runtime, void* stream = nullptr);

 private:
  friend struct internal::Internals;
  std::unique_ptr<internal::DecodeWorkspaceImpl> impl_;
};

// Sizes `ws` for plans of up to limits.max_batch sequences of the given
// layer shape on `runtime`'s device, so that no step allocates. On the host
// larger plans still work (buffers grow); on a device backend this is the
// one place device memory is allocated (owned by `ws`; a smaller earlier
// reservation is replaced) and larger plans fail with FailedPrecondition.
// InvalidArgument naming the field ("limits.head_dim: ...") for limits out
// of range; ResourceExhausted when the device is out of memory.
absl::Status ReserveDecodeWorkspace(Runtime& runtime,
                                    const DecodeLimits& limits,
                                    DecodeWorkspace& ws);

// Device bytes BindDecodeWorkspace needs for `limits`; 0 on host backends.
absl::StatusOr<int64_t> DecodeWorkspaceBytes(Runtime& runtime,
                                             const DecodeLimits& limits);

// As ReserveDecodeWorkspace on a device backend, in caller memory: `memory`
// (device memory of the runtime's device, 256-byte aligned, at least
// DecodeWorkspaceBytes(runtime, limits) bytes) must outlive every step run
// with `ws`. Initializes it on `stream`. InvalidArgument for a null,
// misaligned or short `memory`; Unimplemented on host backends.
absl::Status BindDecodeWorkspace(Runtime& runtime, const DecodeLimits& limits,
                                 void* memory, int64_t bytes,
                                 DecodeWorkspace& ws, void* stream = nullptr);

// ---- PlanDecode: the inspector ----------------------------------------------

struct PlanDecodeArgs {
  TensorRef seq_lens;  // [B] i32 in HOST memory, each in [0, kMaxSeqLen]
  int64_t page_size = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;
  void* stream = nullptr;  // device backends: the work list is copied here
};

// Builds the balanced work list for `args.seq_lens` into `ws` (O(B * Hkv)
// host work, no allocation once `ws` has seen the batch) and, on a device
// backend, enqueues its copy into the workspace on `stream` (the host
// buffer may be reused as soon as this returns). On error `ws` is left not
// planned.
absl::Status PlanDecode(Runtime& runtime, const PlanDecodeArgs& args,
                        DecodeWorkspace& ws);

// ---- RunDecode: the executor ------------------------------------------------

struct RunDecodeArgs {
  TensorRef q;            // [B', Hq, D] bf16 | f16, B' >= the plan's B
  TensorRef k_cache;      // [num_pages, page_size, Hkv, D] dtype of q
  TensorRef v_cache;      // [num_pages, page_size, Hkv, D] dtype of q
  TensorRef block_table;  // [B', max_pages] i32, last dim contiguous
  TensorRef seq_lens;     // [B'] i32 on the runtime's device; the plan's
                          // lengths (first B entries)
  TensorRef out;          // [B', Hq, D] dtype of q; rows past B untouched
  std::optional<TensorRef> lse;   // [B', Hq] f32 contiguous; rows past B
                                  // untouched
  std::optional<float> sm_scale;  // > 0; unset: 1 / sqrt(D)
  float logits_soft_cap = 0;      // >= 0; 0: no cap
  void* stream = nullptr;         // device backends
};

// out[b, j, :] = softmax_t(s[b, j, t]) . v[b, t, j / group, :] over the
// first seq_lens[b] tokens of each of the plan's B sequences (see the
// conventions above). The plan must come from a PlanDecode of the same
// head counts, head_dim, page_size and dtype. out must not overlap q, the
// caches or lse.
absl::Status RunDecode(Runtime& runtime, const RunDecodeArgs& args,
                       DecodeWorkspace& ws);

// ==== Ragged attention: every row kind in one plan ===========================
//
// One serving step mixes new prompts (q_len = kv_len), chunks of long prompts
// over a cached prefix (q_len < kv_len), speculative rows (q_len 2..8) and
// decode rows (q_len 1). PlanRagged plans all of them at once and RunRagged
// runs the plan, under the conventions above (shapes, KV layout by strides,
// block tables, softmax, soft cap, errors, host vs device backends, CUDA
// graphs) plus:
// - Queries are ragged: sequence b owns rows [q_indptr[b], q_indptr[b + 1])
//   of q [Σq, Hq, D] and out, and its q_len = q_indptr[b + 1] - q_indptr[b]
//   query tokens are the LAST q_len of its kv_len KV positions (token t sits
//   at position kv_len - q_len + t, as in vLLM and FlashInfer). A sequence's
//   new tokens must already be in the cache when RunRagged runs.
// - causal: token t attends positions <= kv_len - q_len + t (q_len <= kv_len
//   is required); with window_left = w >= 0 also >= that position - w
//   (FlashInfer's window_left; vLLM's window_size = (w, 0)). Not causal:
//   every token attends all kv_len positions. A row that attends nothing
//   gets out = 0 and lse = -inf.
// - Kernels are specialized on dtype, head_dim, group, page_size and the
//   mask kind (none / causal / window) only: one model needs a few variants
//   whatever its batches (ops/attention/ragged_spec.h lists them).
// - On CUDA the q_len = 1 rows of a step (without a sliding window) run on
//   the paged-decode kernel of RunDecode, the other rows as query tiles: two
//   launches (plus the tiles' merge) per RunRagged whatever the split, so a
//   captured graph replays steps with any mix (plan().decode_seqs counts
//   them; tuning key ragged.decode_rows=prefill keeps them in tiles).
//
// Metadata adapters:
//   vLLM (FlashAttention metadata)  q_indptr = query_start_loc (host copy),
//     kv_lens = seq_lens (host copy) for PlanRagged; block_table, seq_lens
//     (device) for RunRagged. No conversion.
//   FlashInfer (paged prefill wrapper)  PlanRaggedFlashInfer takes qo_indptr,
//     kv_indptr and kv_last_page_len (host) and derives the KV lengths;
//     RunRagged takes kv_indices as a rank-1 block_table with
//     page_indptr = kv_indptr (device).
//
// Example (every step; plan once, run every layer):
//   attention::RaggedWorkspace ws;            // keep it across steps
//   TAILOR_RETURN_IF_ERROR(attention::ReserveRaggedWorkspace(runtime,
//       {.max_batch = 256, .max_tokens = 8192, .num_qo_heads = 32,
//        .num_kv_heads = 8, .head_dim = 128, .page_size = 16}, ws));
//   TAILOR_RETURN_IF_ERROR(attention::PlanRagged(runtime,
//       {.q_indptr = TensorRef::Contiguous(query_start_loc, DType::kI32,
//                                          {B + 1}),
//        .kv_lens = TensorRef::Contiguous(seq_lens, DType::kI32, {B}),
//        .page_size = 16, .num_qo_heads = 32, .num_kv_heads = 8,
//        .head_dim = 128, .stream = stream}, ws));
//   for (int layer = 0; layer < layers; ++layer) {
//     TAILOR_RETURN_IF_ERROR(attention::RunRagged(runtime,
//         {.q = q, .k_cache = k[layer], .v_cache = v[layer],
//          .block_table = block_table, .out = out, .stream = stream}, ws));
//   }

// Sizes of the largest plan a workspace serves, and the layer it serves.
struct RaggedLimits {
  int64_t max_batch = 0;       // B of the largest plan
  int64_t max_tokens = 0;      // Σ q_len of the largest plan
  int64_t num_qo_heads = 0;    // Hq
  int64_t num_kv_heads = 0;    // Hkv
  int64_t head_dim = 0;        // D: 64, 128 or 256
  int64_t page_size = 0;       // [1, kMaxPageSize]
  DType dtype = DType::kBF16;  // bf16 or f16
  bool causal = true;
  int64_t window_left = -1;  // -1: none; >= 0 needs causal
};

// What the last PlanRagged planned, for logs, tests and benches.
struct RaggedPlanSummary {
  int32_t batch = 0;
  int64_t total_q = 0;       // Σ q_len
  int32_t tiles = 0;         // query tiles before splitting
  int32_t items = 0;         // pieces run (whole tiles included)
  int32_t tail_tiles = 0;    // tiles with fewer rows than a full tile
  int32_t masked_tiles = 0;  // tiles with masked KV blocks
  int32_t split_tiles = 0;   // tiles in pieces merged by log-sum-exp
  int32_t partials = 0;      // partial slots used
  int32_t workers = 0;       // CUDA: CTAs of the grid; CPU: tasks
  int32_t busy_workers = 0;  // workers with work
  int32_t tile_rows = 0;     // packed rows per tile
  int32_t head_pack = 0;     // query heads packed into a tile's rows
  int64_t max_worker_cost = 0;
  double mean_worker_cost = 0;
  // Sequences of q_len 1 run on the paged-decode kernel (CUDA; the tiles
  // above are the other sequences'), and that kernel's work items.
  int32_t decode_seqs = 0;
  int32_t decode_items = 0;
  std::string ToString() const;  // "batch=3 total_q=20 tiles=4 ..."
};

// Caller-owned state of ragged steps: the last plan and, on device
// backends, the device memory its kernels use. Movable, not copyable; a
// moved-from workspace fails every call with FailedPrecondition. Not
// thread-safe: one per thread (or stream).
class RaggedWorkspace {
 public:
  RaggedWorkspace();
  ~RaggedWorkspace();
  RaggedWorkspace(RaggedWorkspace&& other) noexcept;
  RaggedWorkspace& operator=(RaggedWorkspace&& other) noexcept;
  RaggedWorkspace(const RaggedWorkspace&) = delete;
  RaggedWorkspace& operator=(const RaggedWorkspace&) = delete;

  bool planned() const;
  int64_t batch() const;    // B of the last plan (0 when not planned)
  int64_t total_q() const;  // Σ q_len of the last plan
  Device device() const;
  RaggedPlanSummary plan() const;
  size_t CapacityBytes() const;

  // As DecodeWorkspace::TakeErrors: the first bad page id RunRagged met
  // (and dropped) on the device, else the first device kv_lens[b] that
  // differs from the plan, with the host check's text, e.g.
  // InvalidArgument("block_table[3,7]: page id 9999 is outside [0, 512)")
  // or InvalidArgument("kv_lens[2]: 17 differs from 16, the length
  // PlanRagged planned"). Waits for `stream`. OkStatus on host backends.
  absl::Status TakeErrors(Runtime& runtime, void* stream = nullptr);

 private:
  friend struct internal::Internals;
  std::unique_ptr<internal::RaggedWorkspaceImpl> impl_;
};

// Sizes `ws` for plans of up to limits.max_batch sequences and
// limits.max_tokens query tokens of the given layer, so that no step
// allocates. On the host larger plans still work (buffers grow); on a device
// backend this is the one place device memory is allocated and larger plans
// fail with FailedPrecondition. InvalidArgument naming the field
// ("limits.max_tokens: ...") for limits out of range; Unimplemented when
// the backend has no ragged kernels for the layer.
absl::Status ReserveRaggedWorkspace(Runtime& runtime,
                                    const RaggedLimits& limits,
                                    RaggedWorkspace& ws);

// Device bytes BindRaggedWorkspace needs for `limits`; 0 on host backends.
// InvalidArgument naming the field for limits out of range.
absl::StatusOr<int64_t> RaggedWorkspaceBytes(Runtime& runtime,
                                             const RaggedLimits& limits);

// As ReserveRaggedWorkspace on a device backend, in caller memory: `memory`
// (device memory of the runtime's device, 256-byte aligned, at least
// RaggedWorkspaceBytes(runtime, limits) bytes; e.g. a torch tensor) must
// outlive every step run with `ws`. Initializes it on `stream`.
// InvalidArgument for a null, misaligned or short `memory`; Unimplemented
// on host backends, whose workspaces live in host memory.
absl::Status BindRaggedWorkspace(Runtime& runtime, const RaggedLimits& limits,
                                 void* memory, int64_t bytes,
                                 RaggedWorkspace& ws, void* stream = nullptr);

struct PlanRaggedArgs {
  TensorRef q_indptr;  // [B + 1] i32 HOST: q_indptr[0] = 0, non-decreasing
  TensorRef kv_lens;   // [B] i32 HOST: KV length of each sequence, its new
                       // tokens included
  int64_t page_size = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;
  bool causal = true;
  int64_t window_left = -1;  // -1: none; >= 0 needs causal
  void* stream = nullptr;    // device backends: the plan is copied here
};

// Builds the work list of the step into `ws` (O(tiles) host work, no
// allocation once `ws` has seen such a step) and, on a device backend,
// enqueues its copy on `stream` (the host buffers may be reused as soon as
// this returns). InvalidArgument naming the argument and the rule, e.g.
// "q_indptr[3]: 17 is less than q_indptr[2] = 20" or "q_lens[1]: 6 exceeds
// kv_lens[1] = 4; causal queries are the last q_len of their KV" (q_lens:
// the differences of q_indptr). On error `ws` is left not planned.
absl::Status PlanRagged(Runtime& runtime, const PlanRaggedArgs& args,
                        RaggedWorkspace& ws);

// PlanRagged from FlashInfer's paged metadata (all HOST, i32):
//   kv_lens[b] = (kv_indptr[b + 1] - kv_indptr[b] - 1) * page_size
//                + kv_last_page_len[b]   (0 for a sequence with no pages)
// kv_last_page_len[b] must be in [1, page_size] for a sequence with pages.
struct PlanRaggedFlashInferArgs {
  TensorRef qo_indptr;         // [B + 1]
  TensorRef kv_indptr;         // [B + 1] pages of each sequence
  TensorRef kv_last_page_len;  // [B]
  int64_t page_size = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;
  bool causal = true;
  int64_t window_left = -1;
  void* stream = nullptr;
};
absl::Status PlanRaggedFlashInfer(Runtime& runtime,
                                  const PlanRaggedFlashInferArgs& args,
                                  RaggedWorkspace& ws);

struct RunRaggedArgs {
  TensorRef q;        // [Σq', Hq, D] bf16 | f16, Σq' >= the plan's Σq
  TensorRef k_cache;  // [num_pages, page_size, Hkv, D] dtype of q
  TensorRef v_cache;  // [num_pages, page_size, Hkv, D] dtype of q
  // Pages of sequence b, either
  //   [B', max_pages] i32 (vLLM's block_table), B' >= B, or
  //   [nnz] i32 (FlashInfer's kv_indices) with page_indptr set: sequence
  //   b's pages are block_table[page_indptr[b] .. page_indptr[b + 1]).
  //   Device backends read it unchecked: a range outside [0, nnz) or
  //   reversed holds no pages (its tokens count as bad page ids).
  TensorRef block_table;
  std::optional<TensorRef> page_indptr;  // [B' + 1] i32 (kv_indptr)
  // [B'] i32, the plan's kv_lens (vLLM's seq_lens on the device). Host
  // backends check them against the plan before running. CUDA and HIP
  // compare them on the device (one load per query tile or decode row) and
  // report a kv_lens[b] that differs through RaggedWorkspace::TakeErrors;
  // the sequence's query tiles still attend the planned length, its decode
  // row min(planned, kv_lens[b]) as RunDecode does. Unset: nothing to
  // compare.
  std::optional<TensorRef> kv_lens;
  TensorRef out;                  // [Σq', Hq, D] dtype of q; rows past Σq
                                  // untouched
  std::optional<TensorRef> lse;   // [Σq', Hq] f32 contiguous
  std::optional<float> sm_scale;  // > 0; unset: 1 / sqrt(D)
  float logits_soft_cap = 0;      // >= 0; 0: no cap
  void* stream = nullptr;         // device backends
};

// out[i, j, :] = softmax over the positions query row i of its sequence
// attends (causal / window as planned) of s . v, for the plan's Σq rows.
// The plan must come from PlanRagged on this workspace. out must not
// overlap q, the caches or lse.
absl::Status RunRagged(Runtime& runtime, const RunRaggedArgs& args,
                       RaggedWorkspace& ws);

}  // namespace attention
}  // namespace tailor

#endif  // TAILOR_OPS_ATTENTION_H_
