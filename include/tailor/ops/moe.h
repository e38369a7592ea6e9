// tailor/ops/moe.h — mixture-of-experts layers over ragged expert routing.
//
// A MoE layer sends each of T tokens to k of E experts. The per-expert token
// counts change every step, so tailor splits the work into an *inspector*
// and *executors*:
//
//   Route        topk_ids [T, k] -> per-expert counts and offsets, the
//                expert-sorted row order (permutation), its inverse, and a
//                piecewise plan: each expert's rows cut into full tiles of
//                tile_rows rows (the core) plus at most one tail piece whose
//                size is rounded to a small set of *tail classes*
//   Pack         hidden [T, H] -> A [R, H], the rows in expert-sorted order
//   GroupedGemm  A [R, K] x W [E, N, K] -> C [R, N] (or silu_and_mul of it),
//                one JIT kernel per plan variant: an unmasked core kernel and
//                one per tail class
//   Combine      C [R, H] -> out [T, H], each token's rows weighted and summed
//   Experts      all of the above: vLLM's fused_experts
//
// Names (one scheme for every op family; attention.h follows it too): the
// caller-owned state of a family is `<family>::Workspace` (a family with
// several kinds of state prefixes the kind: attention::DecodeWorkspace);
// Reserve<X>(runtime, limits, ws) sizes it, <X>Bytes(runtime, limits) says
// what Bind<X>(runtime, limits, memory, bytes, ws, stream) needs, and
// ws.TakeErrors(runtime, stream) reports what the device dropped. The
// workspace is the last argument before the stream. In C the same entries
// are tailor_<family>_workspace_<verb> (tailor_moe_workspace_reserve, ...)
// and tailor_<family>_<op> (tailor_moe_route, ...), see tailor/c_api.h.
//
// Kernels are specialized on dtype and model dims (H, N, K, top-k), the tile
// and the tail class, never on T, R or per-expert counts, so a warm server
// compiles nothing however the routing changes: on the CPU, with the default
// policy, a GroupedGemm needs at most 1 + 5 kernels (core, tails 1, 2, 4, 8,
// 16); on CUDA one kernel runs the core and every tail class of a GEMM.
//
// Conventions for every function here:
// - T tokens, k = top-k, E local experts (the first dim of the weights),
//   R = number of (token, slot) assignments routed to a local expert
//   (R = T * k without an expert_map).
// - Tensors are TensorRef views the caller owns. All must be contiguous
//   (row-major), live on the runtime's device (Runtime::device()), and hold
//   the listed dtype. Activations and weights are bf16 or f32 (one dtype per
//   call); indices are i32; routing weights f32. Accumulation is always f32.
//   On CUDA, activation and weight data must be 16-byte aligned, e4m3 data
//   (FP8 activations, weights and quantized outputs) included.
// - Index tensors (permutation, inverse, offsets) are int32: T * k must be
//   at most 2^31 - 1. Element offsets inside kernels are int64, so R * H and
//   E * N * K are not limited by int32.
// - Errors: InvalidArgument naming the argument and the broken rule (e.g.
//   "topk_ids[5,1]: expert id 9 is outside [0, 8)"), checked before any
//   kernel is looked up or launched, so a rejected call writes nothing;
//   FailedPrecondition for a Workspace that has not been routed (or, on a
//   GPU, not reserved for the step); ResourceExhausted when a host
//   Workspace cannot grow to a step's size (out of memory; no
//   std::bad_alloc escapes); Unimplemented when the runtime's backend has
//   no MoE kernels.
// - Host-memory backends (cpu): every call is synchronous and the host
//   checks tensor contents too (ids, maps, permutations).
//   Device backends (cuda): every call is asynchronous on `stream` (a
//   CUstream / cudaStream_t; null = the legacy default stream): no host
//   sync, no allocation, so a whole step can be captured in a CUDA graph.
//   The host never reads device tensors, so contents are checked on the
//   device: a bad expert id or map entry drops its assignment (no
//   out-of-bounds access) and is recorded in the Workspace, which
//   Workspace::TakeErrors reports with the host check's text at a
//   sync point the caller chooses. Permutation and inverse entries out of
//   range (they come from Route) drop their row or slot.
// - Device memory: a Workspace on a device backend holds its buffers in
//   device memory that ReserveWorkspace allocates once (owned by the
//   Workspace, freed with it) or that BindWorkspace borrows from the caller
//   (e.g. a torch tensor). Steps larger than the reservation fail with
//   FailedPrecondition; they never allocate.
// - A Workspace is not thread-safe: use one per thread (or per stream).
//
// Example (one MoE layer, vLLM semantics):
//   tailor::moe::Workspace workspace;  // keep it: reused every step
//   TAILOR_RETURN_IF_ERROR(tailor::moe::ReserveWorkspace(runtime,
//       {.max_tokens = 8192, .topk = k, .num_experts = E, .hidden = H,
//        .intermediate = I, .dtype = DType::kBF16}, workspace));
//   absl::Status s = tailor::moe::Experts(runtime, {
//       .hidden = TensorRef::Contiguous(x, DType::kBF16, {T, H}),
//       .w13 = TensorRef::Contiguous(w13, DType::kBF16, {E, 2 * I, H}),
//       .w2 = TensorRef::Contiguous(w2, DType::kBF16, {E, H, I}),
//       .topk_weights = TensorRef::Contiguous(tw, DType::kF32, {T, k}),
//       .topk_ids = TensorRef::Contiguous(ids, DType::kI32, {T, k}),
//       .out = TensorRef::Contiguous(y, DType::kBF16, {T, H})}, workspace);
//
// Example (the same, step by step; A, C1, C2 are caller buffers of
// ws.num_rows() rows):
//   moe::Workspace ws;
//   TAILOR_RETURN_IF_ERROR(
//       moe::Route(runtime, {.topk_ids = ids, .num_experts = E}, ws));
//   TAILOR_RETURN_IF_ERROR(moe::Pack(
//       runtime,
//       {.hidden = x, .permutation = ws.permutation(), .topk = k, .a = A}));
//   TAILOR_RETURN_IF_ERROR(moe::GroupedGemm(
//       runtime,
//       {.a = A, .w = w13, .c = C1, .epilogue = moe::Epilogue::kSiluAndMul},
//       ws));
//   TAILOR_RETURN_IF_ERROR(
//       moe::GroupedGemm(runtime, {.a = C1, .w = w2, .c = C2}, ws));
//   TAILOR_RETURN_IF_ERROR(moe::Combine(
//       runtime,
//       {.c = C2, .topk_weights = tw, .inverse = ws.inverse(), .out = y}));
#ifndef TAILOR_OPS_MOE_H_
#define TAILOR_OPS_MOE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor {
namespace internal {
struct MoeWorkspace;
}  // namespace internal

namespace moe {

// Largest accepted values of the static (compiled-in) quantities.
// RoutingPolicy::tile_rows: the most any backend accepts (cpu 64, cuda 128).
inline constexpr int64_t kMaxTileRows = 128;
inline constexpr int64_t kMaxTopk = 64;          // k
inline constexpr int64_t kMaxModelDim = 65536;   // H, I, N, K
inline constexpr int64_t kMaxExperts = 1 << 20;  // E and the expert_map length

// How the rows of one expert are cut for the GroupedGemm kernels.
enum class TailPolicy : uint8_t {
  // A tail of n rows runs in the kernel of class next_pow2(n): at most
  // log2(tile_rows) + 1 tail kernels, at most 2x padding inside a tail.
  kNextPowerOfTwo = 0,
  // Every tail size is its own class: no padding, up to tile_rows - 1 tail
  // kernels.
  kExact = 1,
  // Every tail runs in one masked kernel of tile_rows rows (pad to block).
  kFullTile = 2,
};

// An aggregate: designated initializers, defaults are the recommended policy.
struct RoutingPolicy {
  // Rows of a core tile, in [1, the backend's maximum] (cpu 64, cuda 128);
  // 0: the backend's choice (cpu 16; cuda 128 on Hopper, 64 elsewhere).
  int32_t tile_rows = 0;
  TailPolicy tail = TailPolicy::kNextPowerOfTwo;
};

// One GroupedGemm configuration, as the backend chose it for (N, K, the
// plan's tile rows, the device): the kernel family, its tiling, and the
// family's own options as text, so that a new option (a scale mode, another
// architecture's schedule) adds a key, not a field. Fields a family does not
// have are 0.
struct GemmChoice {
  std::string kernel;    // "cpu", "cuda.sm90_tma_wgmma",
                         // "cuda.sm90_tma_wgmma_swap_ab" (decode steps:
                         // cta_rows is the tokens, wgmma's N),
                         // "cuda.sm90_tma_wgmma_fp8[_swap_ab]" (FP8),
                         // "cuda.sm80_mma", "cuda.sm80_mma_fp8",
                         // "cuda.simt", "hip.mfma", "hip.simt"; while a
                         // background compile is pending on CUDA,
                         // "cuda.generic_mma", "cuda.generic_simt" or
                         // "cuda.generic_mma_fp8" (FP8)
  int64_t n = 0;         // W rows per expert
  int64_t k = 0;         // reduction dim
  int32_t cta_rows = 0;  // A rows of one CTA (work-group) tile
  int32_t cta_cols = 0;  // W rows of one CTA tile
  int32_t k_tile = 0;    // K per pipeline stage
  int32_t stages = 0;    // shared-memory pipeline depth
  int32_t ctas = 0;      // grid size (persistent kernels: <= the SMs)
  // The kernel family's options, "key=value" entries joined by ",", in the
  // backend's order; "" for a family without any (cpu, cuda.sm80_mma, ...).
  // Keys are [a-z0-9_]+, values [a-z0-9_]+ (flags 0 or 1). The Hopper
  // kernels (cuda.sm90_tma_wgmma*) list:
  //   tma_store      1: full tiles leave by TMA stores
  //   split_k        1: K split for launches of few tiles and for a partial
  //                  last wave
  //   cluster        CTAs per thread-block cluster (2: a pair shares each W
  //                  tile by TMA multicast)
  //   w_evict_first  1: W streamed with an L2 evict-first policy
  //   wave_sync      1: tiles run in waves that start together
  //   expert_groups  raster group bounds: fixed, forward or back
  // e.g. "tma_store=1,split_k=0,cluster=2,w_evict_first=0,wave_sync=1,
  // expert_groups=fixed". FP8 launches (cpu, cuda.sm90_tma_wgmma_fp8*) list
  //   scale_mode     per_tensor, per_channel or block
  // A key a kernel does not list is not an option of that kernel; new keys
  // may appear in any release.
  std::string features;

  // The value of `key` in features; nullopt when the kernel does not list it.
  std::optional<std::string> Feature(std::string_view key) const;
  // "cuda.sm90_tma_wgmma N=4096 K=7168 cta=128x128 ... [tma_store=1,...]"
  std::string ToString() const;
};

// What the last Route (or PlanRows) planned, for logs and tests, and how the
// GroupedGemm launches since then ran. On device backends the plan is on the
// device: only tile_rows is known on the host and the counts are -1.
struct PlanSummary {
  int32_t tile_rows = 0;
  int32_t core_tiles = 0;     // full tiles, run by the unmasked core kernel
  int32_t tail_pieces = 0;    // experts whose count is not a tile multiple
  int32_t variants = 0;       // kernels one GroupedGemm launches
  int64_t useful_rows = 0;    // R
  int64_t executed_rows = 0;  // R plus the padding of tails up to their class
  // The last two GroupedGemm launches on this plan, oldest first (Experts:
  // gate/up, then down).
  std::vector<GemmChoice> gemms;
  // The routing runtime's active moe.* tuning keys (Runtime::tuning()),
  // e.g. "moe.cluster=2"; "" when none is set.
  std::string tuning;
  std::string ToString() const;  // "tile_rows=16 core=3 tails=2 variants=3 ..."
};

// Caller-owned, reusable state of one MoE layer call: the routing of the
// last Route (counts, offsets, permutation, inverse, plan) and the
// intermediate activations of Experts. Buffers only grow: once a Workspace
// has seen the largest step (T, k, E, dims) it will be given, routing and
// running never allocate again. Movable, not copyable; every call given a
// moved-from Workspace fails with FailedPrecondition (assign a new one).
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(Workspace&& other) noexcept;
  Workspace& operator=(Workspace&& other) noexcept;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // True after a successful Route or PlanRows; false initially, after a
  // failed one, and once moved from.
  bool routed() const;
  int64_t num_tokens() const;   // T of the last Route; 0 after PlanRows
  int64_t topk() const;         // k of the last Route; 0 after PlanRows
  int64_t num_experts() const;  // E (local)
  // R on host backends. On device backends R is on the device and this is
  // its bound T * k (exact without expert_map and valid_tokens): row buffers
  // passed to GroupedGemm have this many rows, of which the first R are
  // used.
  int64_t num_rows() const;
  // Where the buffers live: the host, or the device of the runtime given to
  // ReserveWorkspace / BindWorkspace.
  Device device() const;

  // Reports the bad routing data the device Route dropped since the last
  // call (the lowest position first), with the text of the host check, e.g.
  // InvalidArgument("topk_ids[5,1]: expert id 9 is outside [0, 8)"), and
  // forgets it. Positions are read with the last Route's k. Waits for
  // `stream` (a sync point of the caller's choosing). OkStatus on host
  // backends, whose Route reports errors itself.
  absl::Status TakeErrors(Runtime& runtime, void* stream = nullptr);
  // The name TakeErrors had before every family used one; removed in the
  // next release.
  [[deprecated("use TakeErrors")]] absl::Status TakeRoutingErrors(
      Runtime& runtime, void* stream = nullptr) {
    return TakeErrors(runtime, stream);
  }

  // Views of the routing (valid until the next Route, PlanRows or Experts
  // on this Workspace; on a device backend they are device tensors, written
  // when the stream reaches them; empty views when not routed):
  TensorRef counts() const;   // [E] i32 rows per local expert
  TensorRef offsets() const;  // [E + 1] i32 first row of each expert
  // [R] i32 flat assignment index t * k + j of each expert-sorted row:
  // rows are ordered by local expert, then by (t, j) (stable). On device
  // backends [T * k], with -1 past R.
  TensorRef permutation() const;  // after PlanRows: [0]
  // [T, k] i32 the row of assignment (t, j), or -1 when its expert is not
  // local (expert_map maps it to -1).
  TensorRef inverse() const;  // after PlanRows: [0, 0]

  PlanSummary plan() const;
  // Bytes of buffer capacity held (host or device); constant across steps
  // that fit.
  size_t CapacityBytes() const;

 private:
  friend struct internal::Internals;
  std::unique_ptr<internal::MoeWorkspace> impl_;
};

// The largest step a Workspace will see, for ReserveWorkspace.
struct WorkspaceLimits {
  int64_t max_tokens = 0;   // T, >= 0; T * topk <= 2^31 - 1
  int64_t topk = 0;         // k, in [1, kMaxTopk]
  int64_t num_experts = 0;  // E (local), in [1, kMaxExperts]
  int64_t hidden = 0;  // H for Experts, in [0, kMaxModelDim] (0: routing only)
  int64_t intermediate =
      0;  // I for Experts, in [0, kMaxModelDim] (0: routing only)
  DType dtype = DType::kBF16;  // activations: bf16 or f32
  RoutingPolicy policy;
};

// Sizes every buffer of `ws` for steps up to `limits` on `runtime`'s device
// now, so that no step allocates (before CUDA-graph capture, or for a
// latency budget). On the host, steps beyond the limits still work: the
// buffers grow then. On a device backend this is the one place device
// memory is allocated (owned by `ws`; a smaller earlier reservation is
// replaced) and steps beyond it fail with FailedPrecondition. A
// limits.policy.tile_rows of 0 resolves to the backend's choice.
// InvalidArgument naming the field for limits out of range;
// ResourceExhausted when the device is out of memory.
absl::Status ReserveWorkspace(Runtime& runtime, const WorkspaceLimits& limits,
                              Workspace& ws);

// Device bytes BindWorkspace needs for `limits` on `runtime`; 0 on host
// backends. InvalidArgument as ReserveWorkspace.
absl::StatusOr<int64_t> WorkspaceBytes(Runtime& runtime,
                                       const WorkspaceLimits& limits);

// As ReserveWorkspace on a device backend, but in caller memory: `memory`
// (device memory of `runtime`'s device, 256-byte aligned, at least
// WorkspaceBytes(runtime, limits) bytes) must outlive every step run with
// `ws`. Initializes it on `stream`. InvalidArgument for a null, misaligned
// or short `memory`; Unimplemented on host backends.
absl::Status BindWorkspace(Runtime& runtime, const WorkspaceLimits& limits,
                           void* memory, int64_t bytes, Workspace& ws,
                           void* stream = nullptr);

// ---- Route: the inspector ---------------------------------------------------

struct RouteArgs {
  // [T, k] i32 expert ids (global when expert_map is set). A token's k ids
  // are distinct experts: k <= E, or k <= E_global with an expert_map.
  TensorRef topk_ids;
  // E: local experts. Ids (after expert_map) must be in [0, E).
  int64_t num_experts = 0;
  // [E_global] i32 global id -> local id, or -1 for an expert on another
  // rank (its assignments contribute nothing). Ids must be in [0, E_global);
  // entries in [-1, E).
  std::optional<TensorRef> expert_map;
  // [1] i32 <= T: only the first valid_tokens tokens are routed, the rest
  // are padding (their inverse is -1; Experts writes zeros for them). Lets
  // one captured CUDA graph serve every T up to its bucket. Unset: all T.
  std::optional<TensorRef> valid_tokens;
  RoutingPolicy policy;
  void* stream = nullptr;  // device backends
};

// Counting-sorts the assignments of topk_ids by local expert into `ws`:
// counts, offsets, permutation, inverse and the piecewise plan, O(T * k +
// E), deterministic (the device Route gives the host Route's bits). Host
// backends: plain host code; on error `ws` is left not routed. Device
// backends: the inspector kernels on `stream`, into the device Workspace
// (reserved with ReserveWorkspace or BindWorkspace for at least this T * k
// and E).
absl::Status Route(Runtime& runtime, const RouteArgs& args, Workspace& ws);

struct PlanRowsArgs {
  TensorRef counts;  // [E] i32 rows per expert (>= 0), rows already sorted
  RoutingPolicy policy;
};

// Plans rows that are already expert-sorted (your own routing): only counts,
// offsets and the plan are set, so GroupedGemm works and Pack/Combine need
// your own permutation/inverse. The sum of counts must be <= 2^31 - 1.
// Host backends only (Unimplemented on device backends: route there).
absl::Status PlanRows(Runtime& runtime, const PlanRowsArgs& args,
                      Workspace& ws);

// ---- Pack -------------------------------------------------------------------

struct PackArgs {
  TensorRef hidden;        // [T, H] bf16 | f32
  TensorRef permutation;   // [R] i32, entries in [0, T * topk)
  int64_t topk = 0;        // k, in [1, kMaxTopk]
  TensorRef a;             // [R, H] out, dtype of hidden
  void* stream = nullptr;  // device backends
};

// a[r, :] = hidden[permutation[r] / topk, :]. On device backends a row whose
// entry is outside [0, T * topk) (e.g. the -1 past R) is left untouched.
absl::Status Pack(Runtime& runtime, const PackArgs& args);

// ---- GroupedGemm ------------------------------------------------------------

enum class Epilogue : uint8_t {
  kNone = 0,        // C = A Wᵀ                              c: [R, N]
  kSiluAndMul = 1,  // C = silu(A W[:, :N/2]ᵀ) * A W[:, N/2:]ᵀ   c: [R, N/2]
};

// How FP8 (e4m3, DType::kF8E4M3) operands are scaled: x ~ e4m3 value *
// f32 scale. Values are stable (part of cache keys).
enum class ScaleMode : uint8_t {
  kNone = 0,  // bf16 / f32 operands, no scales
  // One scale per expert's weight matrix and one static scale for all
  // activations.
  kPerTensor = 1,
  // One scale per weight row (output channel) and per activation row
  // (token), computed when the activations are quantized.
  kPerChannel = 2,
  // DeepSeek-V3 / Qwen3 FP8: weights in 128 x 128 blocks, activations in
  // 1 x 128 groups (vLLM use_fp8_w8a8 with block_shape [128, 128]).
  kBlock = 3,
};

// vLLM's block_shape [block_n, block_k]: the weight scale block. Only
// [128, 128] is supported (the checkpoints' and the kernels' block).
struct BlockShape {
  int64_t n = 128;
  int64_t k = 128;
};

// The scales of an FP8 GroupedGemm (mode kNone: a bf16 / f32 GEMM, every
// tensor here must stay empty). Scale tensors are f32, contiguous, on the
// runtime's device; ceil(x / 128) is written x/128 below.
//   mode         a_scale                    w_scale
//   kPerTensor   [1]                        [E]
//   kPerChannel  [R]                        [E, N]
//   kBlock       [K/128, S] (K-block major) [E, N/128, K/128] (as shipped)
// c_scale: only when c is e4m3 (kBlock with kSiluAndMul: the output
// quantized in 1 x 128 groups for the down projection), [N/2/128, S].
// S >= R is the block scales' row stride (scale (r, b) at [b, r]): R, or R
// padded (e.g. to a multiple of 4 for 16-byte rows).
struct GemmQuantization {
  ScaleMode mode = ScaleMode::kNone;
  TensorRef a_scale;
  TensorRef w_scale;
  TensorRef c_scale;
  BlockShape block_shape;
};

struct GroupedGemmArgs {
  TensorRef a;  // [R, K] bf16 | f32, expert-sorted rows (R = ws.num_rows());
                // f8e4m3 with quant.mode set
  TensorRef w;  // [E, N, K] dtype of a, nn.Linear layout (E = ws.num_experts())
  TensorRef c;  // [R, N] or [R, N / 2] (kSiluAndMul; N even), dtype of a;
                // with quant.mode set bf16 | f32, or f8e4m3 (see
                // GemmQuantization::c_scale)
  Epilogue epilogue = Epilogue::kNone;
  GemmQuantization quant;
  void* stream = nullptr;  // device backends
};

// For every expert e and each of its rows r (ws's offsets):
// c[r, :] = epilogue(a[r, :] · w[e]ᵀ). Launches the plan's core kernel and
// one kernel per tail class present. c must not overlap a or w.
// FP8 (quant.mode set): the product of the dequantized A and W, accumulated
// in f32 (block mode: scaled per 128-K block); K must be a multiple of 128
// in block mode (a scale group never straddles two K blocks). Scales are
// used as given: a NaN or infinite scale propagates into C, as the f64
// reference computes. Unimplemented on backends without FP8 kernels.
absl::Status GroupedGemm(Runtime& runtime, const GroupedGemmArgs& args,
                         const Workspace& ws);

// ---- Combine ----------------------------------------------------------------

struct CombineArgs {
  TensorRef c;             // [R, H] bf16 | f32 expert-sorted rows
  TensorRef topk_weights;  // [T, k] f32
  TensorRef inverse;       // [T, k] i32, entries in [-1, R)
  TensorRef out;           // [T, H] out, dtype of c
  void* stream = nullptr;  // device backends
};

// out[t, :] = sum over j with inverse[t, j] >= 0 of
// topk_weights[t, j] * c[inverse[t, j], :]  (zeros when no slot is local).
absl::Status Combine(Runtime& runtime, const CombineArgs& args);

// ---- Experts ----------------------------------------------------------------

enum class Activation : uint8_t { kSilu = 0 };

// The FP8 weights of Experts (mode kNone: bf16 / f32 weights, every tensor
// here must stay empty / unset). w13 and w2 are then f8e4m3; scales f32:
//   mode         w13_scale               w2_scale             a1 / a2_scale
//   kPerTensor   [E]                     [E]                  [1], required
//   kPerChannel  [E, 2I]                 [E, H]               unset
//   kBlock       [E, 2I/128, H/128]      [E, H/128, I/128]    unset
// (x/128 = ceil(x / 128); vLLM's w1_scale is w13_scale). Activations are
// quantized where they already move: Pack quantizes hidden (1 x 128 groups
// in block mode, per token in per-channel mode, by a1_scale per tensor) and,
// in block and per-tensor mode, the gate/up GEMM's silu_and_mul epilogue
// quantizes its output for the down projection (on the host per tensor: a
// requantizing Pack of f32 rows). In per-channel mode the silu_and_mul is
// written in the activation dtype, as vLLM does, and a per-token quantizing
// Pack over its rows follows (one launch more). H and I must be multiples
// of 128 in block mode. On a device (CUDA sm_80 and newer): every mode, H
// and I multiples of 128, bf16 hidden and out, on a Workspace reserved for H
// and I with dtype bf16, whose buffers (the bf16 path's sizes) hold the
// e4m3 intermediates and their scales: the same launches as the bf16 path
// (per channel one more), no allocation, no sync (graph-capturable). Per
// channel the bf16 gate|up rows share the hidden rows with the e4m3 input,
// which needs H > 2 * I on a Workspace reserved for this H (DeepSeek-V3,
// Qwen3-30B-A3B; not Mixtral-8x7B): elsewhere FailedPrecondition naming the
// rule, before anything is written.
struct ExpertsQuantization {
  ScaleMode mode = ScaleMode::kNone;
  TensorRef w13_scale;
  TensorRef w2_scale;
  std::optional<TensorRef> a1_scale;  // static activation scales
  std::optional<TensorRef> a2_scale;
  BlockShape block_shape;
};

struct ExpertsArgs {
  TensorRef hidden;  // [T, H] bf16 | f32
  TensorRef w13;     // [E, 2I, H] dtype of hidden (f8e4m3 with quant.mode
                     // set): gate rows, then up
  TensorRef w2;      // [E, H, I] dtype of w13
  ExpertsQuantization quant;
  TensorRef topk_weights;  // [T, k] f32
  TensorRef topk_ids;      // [T, k] i32 (global ids when expert_map is set)
  std::optional<TensorRef> expert_map;    // [E_global] i32, as in RouteArgs
  std::optional<TensorRef> valid_tokens;  // [1] i32, as in RouteArgs
  Activation activation = Activation::kSilu;
  RoutingPolicy policy;
  TensorRef out;  // [T, H] dtype of hidden; may be hidden itself (in place)
                  // but must not otherwise overlap it
  void* stream = nullptr;  // device backends
};

// vLLM fused_experts: out[t] = sum_j topk_weights[t, j] *
// w2[e] · silu_and_mul(w13[e] · hidden[t]) over the slots j whose expert
// e = expert_map[topk_ids[t, j]] is local. Route -> Pack -> GroupedGemm with
// silu_and_mul -> GroupedGemm -> Combine; the intermediates (R x (H + I)
// elements of the activation dtype) live in `ws`, whose routing views show
// this call's routing afterwards. Tokens at or past valid_tokens get zeros.
// On a device backend: 7 launches on `stream`, none of which allocates or
// syncs; reserve `ws` first (ReserveWorkspace with hidden and intermediate).
absl::Status Experts(Runtime& runtime, const ExpertsArgs& args, Workspace& ws);

}  // namespace moe
}  // namespace tailor

#endif  // TAILOR_OPS_MOE_H_
