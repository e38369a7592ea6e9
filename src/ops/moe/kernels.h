// ops/moe/kernels.h — the MoE kernel family: what the moe:: op fronts ask of
// a backend.
//
// An op front (src/ops/moe/) validates, plans and calls this interface;
// each backend implements it next to its templates
// (src/backends/<name>/moe/, templates/<name>/moe/) and returns it
// from Backend::moe_kernels(). The op front never names a template, a
// generator or a launch shape, so adding a backend adds a folder.
//
// Two kinds of backends:
//   - host-memory backends (the CPU): tensors live on the host, the op front
//     routes and plans on the host (plan::BuildPiecewisePlan) and hands the
//     kernels a host plan;
//   - device-memory backends (CUDA): tensors live on the device, the host
//     never reads them (no sync). Route runs on the device and writes the
//     work list there; the host knows only capacities (T * k rows at most),
//     so kernels are launched with worst-case grids and read the real counts
//     from the device. These backends implement the (optional) device-route
//     slots below.
//
// Nothing here checks arguments: callers pass validated shapes and pointers.
// Zero-sized work launches nothing. Every call is asynchronous on `stream`
// on device backends (no allocation, no sync) and synchronous on the CPU.
#ifndef TAILOR_OPS_MOE_KERNELS_H_
#define TAILOR_OPS_MOE_KERNELS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine.h"
#include "plan/piecewise_plan.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The plan of a routed step: on the host, or on the device.
struct MoePlanRef {
  // Host-memory backends: the op front's plan.
  const plan::PiecewisePlan* host = nullptr;
  // Device-memory backends: the work list the device Route wrote
  // ([max_work], its real length in the route scratch) and that scratch
  // (writable: a GEMM may keep its tile scheduler's counters there).
  const plan::WorkItem* device_work = nullptr;
  void* route_scratch = nullptr;
  int64_t max_work = 0;
};

struct PackLaunch {
  DType dtype;
  int64_t hidden_dim;          // H
  int64_t rows;                // rows of a: R, or its bound T * k (device)
  int64_t tokens;              // T
  int64_t topk;                // k
  const void* hidden;          // [T, H]
  const int32_t* permutation;  // [rows]; device backends skip entries
                               // outside [0, T * k) (e.g. -1 past R)
  void* a;                     // [rows, H]
  void* stream = nullptr;
  // Quantizing Pack (scale_mode set): a is e4m3, quantized by
  // ops/moe/fp8_quant.h's rule: kBlock, 1 x 128 groups, a_scales [H/128,
  // scale_rows]; kPerChannel, per row, a_scales [rows]; kPerTensor, by
  // static_scale[0], no scale written.
  moe::ScaleMode scale_mode = moe::ScaleMode::kNone;
  float* a_scales = nullptr;
  const float* static_scale = nullptr;  // [1]
  int64_t scale_rows = 0;               // kBlock: >= rows
  // Row r reads hidden[r] ([rows, H], already expert-sorted: FP8 Experts'
  // down-projection input on a device), the permutation only marking the
  // rows in use; the CUDA quantizing Pack only (others refuse it).
  bool rows_in_order = false;
};

// One option of a kernel family, for moe::GemmChoice::features: `key`
// (static, [a-z0-9_]+) and its value, printed as `name` when that is set
// (static) and as the integer otherwise.
struct GemmFeature {
  const char* key = nullptr;
  int64_t value = 0;
  const char* name = nullptr;
};
inline constexpr int kMaxGemmFeatures = 8;

// What a backend chose for one GroupedGemm (moe::GemmChoice without
// allocation: the server path records one per launch). A backend lists its
// kernel's own options in `features` (the first entries, up to one without
// a key): a new option is a new entry there, nothing else changes.
struct GemmConfig {
  const char* kernel = "";
  int64_t n = 0, k = 0;
  int32_t cta_rows = 0, cta_cols = 0, k_tile = 0, stages = 0, ctas = 0;
  GemmFeature features[kMaxGemmFeatures] = {};
};

struct GroupedGemmLaunch {
  DType dtype;
  int64_t n;  // W rows per expert
  int64_t k;  // reduction dim
  int64_t tile_rows;
  moe::Epilogue epilogue;
  MoePlanRef plan;
  const void* a;     // [rows, K]
  const void* w;     // [experts, N, K]
  void* c;           // [rows, N] or [rows, N / 2]
  int64_t rows = 0;  // of a and c: R, or its bound T * k (device)
  // Rows the buffers a and c hold, when more than `rows` (a workspace's
  // reserved T * k); 0: `rows`. Backends that describe the buffers to
  // hardware (TMA maps) describe this extent, the same for every step.
  int64_t row_capacity = 0;
  int64_t experts = 0;  // E
  void* stream = nullptr;
  // Set by the backend to the configuration it launches (when not null).
  GemmConfig* config = nullptr;
  // FP8 (scale_mode set): a and w are e4m3 with scales in the layouts of
  // moe::GemmQuantization; c is `dtype`, or e4m3 with 1 x 128 c_scales
  // (dtype kF8E4M3: block mode's quantizing silu_and_mul epilogue).
  moe::ScaleMode scale_mode = moe::ScaleMode::kNone;
  const float* a_scales = nullptr;
  int64_t a_scale_rows = 0;  // kBlock: a_scales' row count (>= rows)
  const float* w_scales = nullptr;
  float* c_scales = nullptr;
  int64_t c_scale_rows = 0;  // quantized c: c_scales' row count (>= rows)
  // kPerTensor with an e4m3 c (device Experts: the gate|up epilogue
  // quantizing for the down GEMM): c = e4m3(out / c_static_scale[0]).
  const float* c_static_scale = nullptr;
};

struct CombineLaunch {
  DType dtype;
  int64_t hidden_dim;      // H
  int64_t tokens;          // T
  int64_t topk;            // k
  int64_t rows;            // R or its bound: inverse entries are < rows
  const void* c;           // [rows, H]
  const float* weights;    // [T, k]
  const int32_t* inverse;  // [T, k]
  void* out;               // [T, H]
  void* stream = nullptr;
};

// The device Route: topk_ids -> counts, offsets, permutation, inverse and
// the work list, bit-identical to the host Route and plan (rows ordered by
// expert, then by assignment index; core tiles first, then tails by class,
// then by expert).
struct DeviceRouteLaunch {
  const int32_t* topk_ids;      // [T, k]
  const int32_t* expert_map;    // [map_size] or null
  int64_t map_size;             // E_global (ids are checked against it)
  const int32_t* valid_tokens;  // [1] or null: only the first *valid_tokens
                                // tokens are routed, the rest are dropped
  int64_t tokens;               // T
  int64_t topk;                 // k
  int64_t experts;              // E (local)
  int64_t tile_rows;
  // tail_class[n] for a tail of n rows, n in [1, tile_rows); [0] unused.
  const int32_t* tail_classes;  // host array [tile_rows]
  // Outputs (device):
  int32_t* counts;       // [E]
  int32_t* offsets;      // [E + 1]
  int32_t* permutation;  // [T * k]; entries past R are -1
  int32_t* inverse;      // [T * k]; -1 for dropped assignments
  plan::WorkItem* work;  // [max_work]
  int64_t max_work;      // floor(T * k / tile_rows) + min(E, T * k)
  void* route_scratch;   // RouteScratchBytes(T * k, E) bytes
  void* stream = nullptr;
};

// Bad routing data the device Route met (and dropped) since the errors were
// last taken. Positions are the first (lowest) ones.
struct RouteErrors {
  struct Bad {
    int64_t position;  // flat index into topk_ids, or the expert_map index
    int32_t value;     // the id or the map entry found there
  };
  std::optional<Bad> bad_id;         // topk_ids entry outside [0, id limit)
  std::optional<Bad> bad_map_entry;  // expert_map entry outside [-1, E)
};

class MoeKernels {
 public:
  virtual ~MoeKernels() = default;

  // The core tile rows a RoutingPolicy of tile_rows 0 resolves to for a
  // step of `assignments` (T * k) over `experts` local experts, of which
  // none gets more than `max_expert_rows` rows (T when a token's ids are
  // distinct; a guess: more rows only cost more tiles): a backend's cost
  // model may pick larger tiles for larger steps, never smaller ones (a
  // reservation sizes the work list with assignments = max_expert_rows =
  // 0). And the most this backend's kernels accept (<= moe::kMaxTileRows).
  virtual int32_t DefaultTileRows(int64_t assignments, int64_t experts,
                                  int64_t max_expert_rows) const = 0;
  virtual int32_t MaxTileRows() const = 0;

  // ---- device routing (optional: device-memory backends) ------------------
  // Bytes of opaque route scratch (histograms, the plan's real length, error
  // words) for routes of up to `max_assignments` assignments over
  // `num_experts` local experts. Defaults to 0 (host backends route on the
  // host).
  virtual int64_t RouteScratchBytes(int64_t max_assignments,
                                    int64_t num_experts) const {
    return 0;
  }
  // The most local experts the device Route supports. Defaults to 0.
  virtual int64_t MaxDeviceRouteExperts() const { return 0; }
  // Prepares fresh scratch (no error recorded). Defaults to Unimplemented.
  virtual absl::Status InitRouteScratch(Engine& engine, void* route_scratch,
                                        void* stream);
  // Runs the device Route. Defaults to Unimplemented.
  virtual absl::Status Route(Engine& engine, const DeviceRouteLaunch& launch);
  // Reads the error record of `route_scratch` and clears it; waits for
  // `stream`. Defaults to Unimplemented.
  virtual absl::StatusOr<RouteErrors> TakeRouteErrors(Engine& engine,
                                                      void* route_scratch,
                                                      void* stream);

  // ---- FP8 (optional) --------------------------------------------------------
  // OkStatus when Pack and GroupedGemm run `mode`'s FP8 launches on this
  // backend for the runtime's device; the op fronts ask before touching
  // memory. Defaults to Unimplemented for every mode but kNone.
  virtual absl::Status SupportsScaleMode(moe::ScaleMode mode) const;

  // ---- executors (required) ------------------------------------------------
  virtual absl::Status Pack(Engine& engine, const PackLaunch& launch) = 0;
  virtual absl::Status GroupedGemm(Engine& engine,
                                   const GroupedGemmLaunch& launch) = 0;
  virtual absl::Status Combine(Engine& engine, const CombineLaunch& launch) = 0;
};

// ---- warm-up: a layer's kernels without a launch ----------------------------
// The static description of one MoE layer: everything its kernels' keys are
// made of (never T, R or per-expert counts). Each backend lists the kernels
// such a layer can need under any routing and batch (cpu::MoeLayerKernels,
// cuda::MoeLayerKernels) with the key builders its launches use, so that
// warm-up and serving cannot disagree.
struct MoeLayerShape {
  DType dtype = DType::kBF16;  // activations (hidden, out)
  // FP8 weights (kNone: weights of `dtype`): the quantizing Pack and the
  // FP8 GEMMs of that mode.
  moe::ScaleMode scale_mode = moe::ScaleMode::kNone;
  int64_t experts = 0;       // E (local)
  int64_t topk = 0;          // k
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I (gate|up: N = 2I, K = H; down: N = H, K = I)
  moe::RoutingPolicy policy;
};

// The MoE kernels of `runtime`'s backend; Unimplemented naming `op` (e.g.
// "moe.pack") when the backend has none.
absl::StatusOr<MoeKernels*> MoeKernelsOf(Runtime& runtime,
                                         absl::string_view op);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_KERNELS_H_
