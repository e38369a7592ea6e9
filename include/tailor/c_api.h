/* tailor/c_api.h — tailor's C ABI: runtimes, stats, the MoE ops, paged
 * decode and ragged attention from C.
 *
 * For C and C++ servers, other languages' FFIs (Python's ctypes, Rust, Go)
 * and anything that must not see C++ types. Every function is a thin shell
 * over the C++ API (tailor/runtime.h, tailor/ops/moe.h,
 * tailor/ops/attention.h): it checks its
 * arguments as the C++ API does, calls it, and converts the result. Nothing
 * crosses this boundary but plain C: no C++ exception escapes (each entry
 * catches everything and reports TAILOR_STATUS_INTERNAL, or
 * TAILOR_STATUS_RESOURCE_EXHAUSTED for an allocation failure) and no entry
 * aborts on bad input (null handles and pointers are InvalidArgument).
 *
 * Link with -ltailor_c (a shared library exporting only the tailor_*
 * symbols below) or with the static libtailor, which holds them too.
 *
 * Conventions:
 * - Status: every fallible entry returns a tailor_status, an absl canonical
 *   code (TAILOR_STATUS_OK == 0). The message of the last call on the
 *   calling thread is tailor_last_error(): thread-local, "" after a call
 *   that succeeded, valid until the next tailor_* call on that thread. (A
 *   thread-local string rather than an out-parameter: every entry keeps one
 *   signature shape, and the common ok path costs one string clear.)
 * - Names: tailor_<family>_<op> for an op (tailor_moe_route,
 *   tailor_attention_decode_plan), tailor_<family>[_<kind>]_workspace_<verb>
 *   for a workspace (tailor_moe_workspace_reserve,
 *   tailor_attention_decode_workspace_bind), as the C++ names are
 *   <family>::[<Kind>]Workspace, Reserve..., ...Bytes, Bind..., TakeErrors.
 *   Ops and reserve/bind/take_errors take the workspace handle last
 *   (before a stream); its accessors (get_info, ...) take it first. The
 *   names these entries had before (tailor_moe_reserve_workspace,
 *   tailor_attention_plan_decode, tailor_decode_workspace, ...) still work,
 *   marked deprecated, until TAILOR_C_API_VERSION 4 (end of this file).
 * - Handles (tailor_runtime, tailor_moe_workspace,
 *   tailor_attention_decode_workspace, tailor_attention_ragged_workspace)
 *   are opaque, created and destroyed here. A runtime is thread-safe; a
 *   workspace is not (one per thread or stream, as in C++). Destroy
 *   workspaces before their runtime.
 * - Tensors are tailor_tensor views the caller owns: data pointer, dtype,
 *   rank, dims, strides counted in elements, device. tailor never frees
 *   them. tailor_tensor_contiguous() fills a row-major view.
 * - Streams are `void*`: a CUstream / cudaStream_t on CUDA runtimes (NULL:
 *   the legacy default stream), ignored by host backends.
 * - Optional tensors (expert_map, valid_tokens, lse, page_indptr) are
 *   pointers: NULL = unset.
 * - Structs are plain aggregates; zero-initialized they hold the defaults
 *   (`tailor_runtime_options options = {0};`). Their layout is part of the
 *   ABI: any change increments TAILOR_C_API_VERSION, which callers compare
 *   with tailor_c_api_version() at load time.
 *
 * Example (C):
 *   tailor_runtime_options options = {0};
 *   options.backend = TAILOR_BACKEND_CPU;
 *   tailor_runtime* rt = NULL;
 *   if (tailor_runtime_create(&options, &rt) != TAILOR_STATUS_OK) {
 *     fprintf(stderr, "tailor: %s\n", tailor_last_error());
 *     return 1;
 *   }
 *   tailor_moe_workspace* ws = NULL;
 *   tailor_moe_workspace_create(&ws);
 *   int64_t hd[2] = {T, H}, w13d[3] = {E, 2 * I, H}, w2d[3] = {E, H, I},
 *           kd[2] = {T, k};
 *   tailor_moe_experts_args args = {0};
 *   args.hidden = tailor_tensor_contiguous(x, TAILOR_DTYPE_F32, 2, hd);
 *   args.w13 = tailor_tensor_contiguous(w13, TAILOR_DTYPE_F32, 3, w13d);
 *   args.w2 = tailor_tensor_contiguous(w2, TAILOR_DTYPE_F32, 3, w2d);
 *   args.topk_weights = tailor_tensor_contiguous(tw, TAILOR_DTYPE_F32, 2, kd);
 *   args.topk_ids = tailor_tensor_contiguous(ids, TAILOR_DTYPE_I32, 2, kd);
 *   args.out = tailor_tensor_contiguous(y, TAILOR_DTYPE_F32, 2, hd);
 *   if (tailor_moe_experts(rt, &args, ws) != TAILOR_STATUS_OK) ...
 *   tailor_moe_workspace_destroy(ws);
 *   tailor_runtime_destroy(rt);
 */
#ifndef TAILOR_C_API_H_
#define TAILOR_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TAILOR_C_EXPORT __declspec(dllexport)
#else
#define TAILOR_C_EXPORT __attribute__((visibility("default")))
#endif

/* Marks a name kept for old callers; `replacement` is its new name. Define
 * TAILOR_C_DEPRECATED(replacement) as nothing before including this header
 * to silence the warnings while migrating. */
#ifndef TAILOR_C_DEPRECATED
#if defined(__GNUC__) || defined(__clang__)
#define TAILOR_C_DEPRECATED(replacement) \
  __attribute__((deprecated("use " replacement)))
#else
#define TAILOR_C_DEPRECATED(replacement)
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Incremented whenever a struct layout, an enum value or a signature here
 * changes incompatibly (new entries and types do not change it). 3:
 * tailor_moe_gemm_choice's Hopper flags became its `features` text; every
 * family's entries follow one naming scheme (the old names remain,
 * deprecated, until 4); later within 3: ragged attention. */
#define TAILOR_C_API_VERSION 3

/* ---- status ------------------------------------------------------------ */

/* absl::StatusCode values, unchanged. */
typedef enum tailor_status {
  TAILOR_STATUS_OK = 0,
  TAILOR_STATUS_CANCELLED = 1,
  TAILOR_STATUS_UNKNOWN = 2,
  TAILOR_STATUS_INVALID_ARGUMENT = 3,
  TAILOR_STATUS_DEADLINE_EXCEEDED = 4,
  TAILOR_STATUS_NOT_FOUND = 5,
  TAILOR_STATUS_ALREADY_EXISTS = 6,
  TAILOR_STATUS_PERMISSION_DENIED = 7,
  TAILOR_STATUS_RESOURCE_EXHAUSTED = 8,
  TAILOR_STATUS_FAILED_PRECONDITION = 9,
  TAILOR_STATUS_ABORTED = 10,
  TAILOR_STATUS_OUT_OF_RANGE = 11,
  TAILOR_STATUS_UNIMPLEMENTED = 12,
  TAILOR_STATUS_INTERNAL = 13,
  TAILOR_STATUS_UNAVAILABLE = 14,
  TAILOR_STATUS_DATA_LOSS = 15,
  TAILOR_STATUS_UNAUTHENTICATED = 16,
} tailor_status;

/* The message of the last tailor_* call on this thread ("" when it
 * succeeded), e.g. "topk_ids: expected rank 2, got 1 ([8] i32 cpu)". Never
 * NULL; valid until the next tailor_* call on this thread. */
TAILOR_C_EXPORT const char* tailor_last_error(void);

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_CODE" for other values. */
TAILOR_C_EXPORT const char* tailor_status_name(int code);

/* TAILOR_C_API_VERSION of the library actually loaded. */
TAILOR_C_EXPORT uint32_t tailor_c_api_version(void);
/* tailor's version, "0.1.0". */
TAILOR_C_EXPORT const char* tailor_version(void);

/* ---- tensors ----------------------------------------------------------- */

/* Values of tailor::DType (tailor/tensor.h). */
typedef enum tailor_dtype {
  TAILOR_DTYPE_F32 = 1,
  TAILOR_DTYPE_BF16 = 2,
  TAILOR_DTYPE_F16 = 3,
  TAILOR_DTYPE_I32 = 4,
  TAILOR_DTYPE_I64 = 5,
  TAILOR_DTYPE_U8 = 6,
  TAILOR_DTYPE_F64 = 7,
  TAILOR_DTYPE_F8E4M3 = 8, /* FP8 e4m3 (torch.float8_e4m3fn): FP8 MoE only */
} tailor_dtype;

/* Values of tailor::DeviceType. */
typedef enum tailor_device_type {
  TAILOR_DEVICE_CPU = 0,
  TAILOR_DEVICE_CUDA = 1,
  TAILOR_DEVICE_HIP = 2,
} tailor_device_type;

#define TAILOR_MAX_RANK 6

/* A non-owning view, as tailor::TensorRef. Dims past `rank` are ignored. */
typedef struct tailor_tensor {
  void* data;
  int32_t dtype; /* tailor_dtype */
  int32_t rank;  /* [0, TAILOR_MAX_RANK] */
  int64_t dims[TAILOR_MAX_RANK];
  int64_t strides[TAILOR_MAX_RANK]; /* in elements */
  int32_t device_type;              /* tailor_device_type */
  int32_t device_index;
} tailor_tensor;

/* A row-major view of `rank` dims on the host (set device_type and
 * device_index for device memory). rank is clamped to [0, TAILOR_MAX_RANK];
 * dims may be NULL when rank is 0. Never fails: a stride that does not fit
 * int64 (dims whose product overflows) is INT64_MAX, and ops reject such a
 * view (its element count overflows) unless another dim is 0. */
TAILOR_C_EXPORT tailor_tensor tailor_tensor_contiguous(void* data,
                                                       int32_t dtype,
                                                       int32_t rank,
                                                       const int64_t* dims);

/* ---- runtime ----------------------------------------------------------- */

typedef struct tailor_runtime tailor_runtime;

/* Values of tailor::BackendKind. */
typedef enum tailor_backend {
  TAILOR_BACKEND_AUTO = 0,
  TAILOR_BACKEND_CPU = 1,
  TAILOR_BACKEND_CUDA = 2,
  TAILOR_BACKEND_HIP = 3,
} tailor_backend;

/* Values of tailor::Runtime::JitMode: how a call meets a kernel that is not
 * compiled yet. */
typedef enum tailor_jit_mode {
  /* $TAILOR_JIT_MODE ("blocking" | "background"), else blocking. */
  TAILOR_JIT_MODE_DEFAULT = 0,
  /* The call compiles the kernel (or waits for the thread compiling it). */
  TAILOR_JIT_MODE_BLOCKING = 1,
  /* The call runs at once on its op family's generic kernel while the
   * specialized one compiles on the compile threads (CPU MoE and CPU paged
   * decode; other families block). */
  TAILOR_JIT_MODE_BACKGROUND = 2,
} tailor_jit_mode;

/* tailor::Runtime::Options; zero = default for every field. */
typedef struct tailor_runtime_options {
  int32_t backend;      /* tailor_backend; 0: cuda, then hip, then cpu */
  int32_t device_index; /* GPU ordinal; 0 for the CPU backend */
  /* Disk cache directory; NULL or "": $TAILOR_CACHE_DIR, else
   * $XDG_CACHE_HOME/tailor, else ~/.cache/tailor. */
  const char* cache_dir;
  int32_t disable_disk_cache; /* nonzero: memory cache only */
  int32_t disable_jit;        /* nonzero: a missing kernel is an error */
  /* Kernels kept in memory; 0: 4096. */
  int64_t memory_cache_capacity;
  int32_t compile_threads; /* 0: hardware threads */
  int32_t cpu_threads;     /* CPU backend workers; 0: hardware threads */
  /* spdlog level (trace ... off); NULL or "": $TAILOR_LOG_LEVEL, else info. */
  const char* log_level;
  /* HTTP stats endpoint "host:port" (/metrics, /stats, /healthz); NULL or
   * "": $TAILOR_STATS_ADDR, else none. Port 0: a free port (see
   * tailor_runtime_info.stats_address). An address given here that cannot
   * be served fails tailor_runtime_create; one from $TAILOR_STATS_ADDR is a
   * warning, and the runtime goes on without an endpoint. */
  const char* stats_addr;
  /* tailor_jit_mode; 0: $TAILOR_JIT_MODE, else blocking. Another value is
   * InvalidArgument. */
  int32_t jit_mode;
} tailor_runtime_options;

/* tailor::Runtime::Create. On success *out is a new runtime (destroy it
 * with tailor_runtime_destroy); on error *out is NULL. InvalidArgument for
 * a null `out`, bad options (an unknown backend or jit mode, a negative
 * count);
 * Unavailable when an explicitly requested backend cannot run here.
 * `options` may be NULL (all defaults). */
TAILOR_C_EXPORT tailor_status tailor_runtime_create(
    const tailor_runtime_options* options, tailor_runtime** out);

/* Destroys a runtime; NULL is a no-op. Never fails. */
TAILOR_C_EXPORT void tailor_runtime_destroy(tailor_runtime* runtime);

/* What a runtime is. The strings live as long as the runtime. */
typedef struct tailor_runtime_info {
  int32_t backend;           /* tailor_backend, never AUTO */
  int32_t device_type;       /* where op tensors must live */
  int32_t device_index;      /* of that device */
  const char* arch;          /* "x86_64-znver3", "sm_90a", ... */
  const char* cache_dir;     /* "" when the disk cache is off */
  const char* stats_address; /* "127.0.0.1:9464"; "" without an endpoint */
  int32_t jit_mode;          /* tailor_jit_mode resolved: never DEFAULT */
} tailor_runtime_info;

TAILOR_C_EXPORT tailor_status tailor_runtime_get_info(
    const tailor_runtime* runtime, tailor_runtime_info* out);

typedef enum tailor_stats_format {
  TAILOR_STATS_JSON = 0,       /* StatsSnapshot::ToJson */
  TAILOR_STATS_PROMETHEUS = 1, /* StatsSnapshot::ToPrometheus */
} tailor_stats_format;

/* A snapshot of the runtime's counters in `format`, as a NUL-terminated
 * string in *out that the caller frees with tailor_string_free. */
TAILOR_C_EXPORT tailor_status
tailor_runtime_stats(const tailor_runtime* runtime, int32_t format, char** out);

/* Frees a string returned by tailor_*; NULL is a no-op. */
TAILOR_C_EXPORT void tailor_string_free(char* s);

/* ---- moe: workspace ---------------------------------------------------- */

typedef struct tailor_moe_workspace tailor_moe_workspace;

/* Values of tailor::moe::TailPolicy. */
typedef enum tailor_moe_tail_policy {
  TAILOR_MOE_TAIL_NEXT_POWER_OF_TWO = 0,
  TAILOR_MOE_TAIL_EXACT = 1,
  TAILOR_MOE_TAIL_FULL_TILE = 2,
} tailor_moe_tail_policy;

/* tailor::moe::RoutingPolicy; zero = the recommended policy. */
typedef struct tailor_moe_routing_policy {
  int32_t tile_rows; /* [1, 64]; 0: the backend's choice */
  int32_t tail;      /* tailor_moe_tail_policy */
} tailor_moe_routing_policy;

/* tailor::moe::WorkspaceLimits. */
typedef struct tailor_moe_workspace_limits {
  int64_t max_tokens;
  int64_t topk;
  int64_t num_experts;
  int64_t hidden;       /* 0: routing only */
  int64_t intermediate; /* 0: routing only */
  int32_t dtype;        /* activations: TAILOR_DTYPE_BF16 or _F32; 0: bf16 */
  tailor_moe_routing_policy policy;
} tailor_moe_workspace_limits;

/* A new, empty workspace in *out (tailor::moe::Workspace). */
TAILOR_C_EXPORT tailor_status
tailor_moe_workspace_create(tailor_moe_workspace** out);
/* NULL is a no-op. Never fails. */
TAILOR_C_EXPORT void tailor_moe_workspace_destroy(tailor_moe_workspace* ws);

/* tailor::moe::ReserveWorkspace. */
TAILOR_C_EXPORT tailor_status tailor_moe_workspace_reserve(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    tailor_moe_workspace* ws);

/* tailor::moe::WorkspaceBytes, into *bytes. */
TAILOR_C_EXPORT tailor_status tailor_moe_workspace_bytes(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    int64_t* bytes);

/* tailor::moe::BindWorkspace: `memory` (device memory, 256-byte aligned,
 * >= tailor_moe_workspace_bytes) must outlive every step run with `ws`. */
TAILOR_C_EXPORT tailor_status tailor_moe_workspace_bind(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    void* memory, int64_t bytes, tailor_moe_workspace* ws, void* stream);

/* tailor::moe::Workspace::TakeErrors: the routing errors the device Route
 * dropped since the last call, as this call's status and message. Waits
 * for `stream`. */
TAILOR_C_EXPORT tailor_status tailor_moe_workspace_take_errors(
    tailor_runtime* runtime, tailor_moe_workspace* ws, void* stream);

/* What a workspace holds (tailor::moe::Workspace's accessors and its
 * PlanSummary); the views are valid until the next call that routes `ws`. */
typedef struct tailor_moe_workspace_info {
  int32_t routed;
  int64_t num_tokens;
  int64_t topk;
  int64_t num_experts;
  int64_t num_rows; /* R on host backends; its bound T * k on devices */
  int64_t capacity_bytes;
  tailor_tensor counts;      /* [E] i32 */
  tailor_tensor offsets;     /* [E + 1] i32 */
  tailor_tensor permutation; /* [R] i32 */
  tailor_tensor inverse;     /* [T, k] i32 */
  /* PlanSummary: counts are -1 on device backends. Its GEMM records:
   * tailor_moe_workspace_gemm_count / tailor_moe_workspace_get_gemm. */
  int32_t tile_rows;
  int32_t core_tiles;
  int32_t tail_pieces;
  int32_t variants;
  int64_t useful_rows;
  int64_t executed_rows;
} tailor_moe_workspace_info;

TAILOR_C_EXPORT tailor_status tailor_moe_workspace_get_info(
    const tailor_moe_workspace* ws, tailor_moe_workspace_info* out);

/* Bytes of tailor_moe_gemm_choice.kernel and .features, NUL included. */
#define TAILOR_MOE_GEMM_KERNEL_SIZE 64
#define TAILOR_MOE_GEMM_FEATURES_SIZE 256

/* One GroupedGemm configuration as the backend chose it
 * (tailor::moe::GemmChoice): the kernel family, its tiling, and the
 * family's own options as "key=value" text, so that a new kernel option
 * never changes this struct. Fields a family does not have are 0. */
typedef struct tailor_moe_gemm_choice {
  /* "cpu", "cuda.sm90_tma_wgmma", "cuda.sm80_mma", "hip.mfma", ...;
   * NUL-terminated. A longer name (no backend has one) is cut to its first
   * TAILOR_MOE_GEMM_KERNEL_SIZE - 1 bytes. */
  char kernel[TAILOR_MOE_GEMM_KERNEL_SIZE];
  int64_t n;        /* W rows per expert */
  int64_t k;        /* reduction dim */
  int32_t cta_rows; /* A rows of one CTA (work-group) tile */
  int32_t cta_cols; /* W rows of one CTA tile */
  int32_t k_tile;   /* K per pipeline stage */
  int32_t stages;   /* shared-memory pipeline depth */
  int32_t ctas;     /* grid size (persistent kernels: <= the SMs) */
  /* 1 when GemmChoice::features did not fit `features`, which then holds
   * its first whole entries (no backend's text is that long); else 0. */
  int32_t features_cut;
  /* GemmChoice::features, NUL-terminated: "key=value" entries joined by
   * ",", e.g. "tma_store=1,split_k=0,cluster=2,...", "" for a family
   * without options (keys and their meaning: GemmChoice in
   * tailor/ops/moe.h). */
  char features[TAILOR_MOE_GEMM_FEATURES_SIZE];
} tailor_moe_gemm_choice;

/* The GEMM records of `ws`'s plan summary (PlanSummary::gemms.size()),
 * into *count: the GroupedGemm launches since the last Route, at most the
 * last 2; 0 when `ws` is not routed. */
TAILOR_C_EXPORT tailor_status
tailor_moe_workspace_gemm_count(const tailor_moe_workspace* ws, int32_t* count);

/* PlanSummary::gemms[index] into *out, oldest first: after an Experts step,
 * index 0 is gate/up (w13) and 1 is down (w2). InvalidArgument for an
 * index outside [0, count), the message naming `index` and the range.
 *
 * Example (C):
 *   int32_t count = 0;
 *   tailor_moe_workspace_gemm_count(ws, &count);
 *   for (int32_t i = 0; i < count; ++i) {
 *     tailor_moe_gemm_choice g;
 *     if (tailor_moe_workspace_get_gemm(ws, i, &g) == TAILOR_STATUS_OK)
 *       printf("%s N=%lld K=%lld\n", g.kernel, (long long)g.n,
 *              (long long)g.k);
 *   } */
TAILOR_C_EXPORT tailor_status tailor_moe_workspace_get_gemm(
    const tailor_moe_workspace* ws, int32_t index, tailor_moe_gemm_choice* out);

/* ---- moe: ops (each mirrors its C++ function; see tailor/ops/moe.h) ---- */

typedef struct tailor_moe_route_args {
  tailor_tensor topk_ids; /* [T, k] i32 */
  int64_t num_experts;
  const tailor_tensor* expert_map;   /* [E_global] i32, or NULL */
  const tailor_tensor* valid_tokens; /* [1] i32, or NULL */
  tailor_moe_routing_policy policy;
  void* stream;
} tailor_moe_route_args;

/* tailor::moe::Route. Any error (a null `args` too) leaves `ws` not
 * routed, so later steps fail instead of using an earlier routing. */
TAILOR_C_EXPORT tailor_status
tailor_moe_route(tailor_runtime* runtime, const tailor_moe_route_args* args,
                 tailor_moe_workspace* ws);

typedef struct tailor_moe_pack_args {
  tailor_tensor hidden;      /* [T, H] */
  tailor_tensor permutation; /* [R] i32 */
  int64_t topk;
  tailor_tensor a; /* [R, H] out */
  void* stream;
} tailor_moe_pack_args;

TAILOR_C_EXPORT tailor_status tailor_moe_pack(tailor_runtime* runtime,
                                              const tailor_moe_pack_args* args);

/* Values of tailor::moe::Epilogue. */
typedef enum tailor_moe_epilogue {
  TAILOR_MOE_EPILOGUE_NONE = 0,
  TAILOR_MOE_EPILOGUE_SILU_AND_MUL = 1,
} tailor_moe_epilogue;

typedef struct tailor_moe_grouped_gemm_args {
  tailor_tensor a;  /* [R, K] */
  tailor_tensor w;  /* [E, N, K] */
  tailor_tensor c;  /* [R, N] or [R, N / 2] */
  int32_t epilogue; /* tailor_moe_epilogue */
  void* stream;
} tailor_moe_grouped_gemm_args;

TAILOR_C_EXPORT tailor_status tailor_moe_grouped_gemm(
    tailor_runtime* runtime, const tailor_moe_grouped_gemm_args* args,
    const tailor_moe_workspace* ws);

typedef struct tailor_moe_combine_args {
  tailor_tensor c;            /* [R, H] */
  tailor_tensor topk_weights; /* [T, k] f32 */
  tailor_tensor inverse;      /* [T, k] i32 */
  tailor_tensor out;          /* [T, H] */
  void* stream;
} tailor_moe_combine_args;

TAILOR_C_EXPORT tailor_status tailor_moe_combine(
    tailor_runtime* runtime, const tailor_moe_combine_args* args);

/* Values of tailor::moe::Activation. */
typedef enum tailor_moe_activation {
  TAILOR_MOE_ACTIVATION_SILU = 0,
} tailor_moe_activation;

typedef struct tailor_moe_experts_args {
  tailor_tensor hidden;              /* [T, H] */
  tailor_tensor w13;                 /* [E, 2I, H] */
  tailor_tensor w2;                  /* [E, H, I] */
  tailor_tensor topk_weights;        /* [T, k] f32 */
  tailor_tensor topk_ids;            /* [T, k] i32 */
  const tailor_tensor* expert_map;   /* [E_global] i32, or NULL */
  const tailor_tensor* valid_tokens; /* [1] i32, or NULL */
  int32_t activation;                /* tailor_moe_activation */
  tailor_moe_routing_policy policy;
  tailor_tensor out; /* [T, H]; may be hidden itself */
  void* stream;
} tailor_moe_experts_args;

/* vLLM fused_experts (tailor::moe::Experts). A token whose topk_ids row
 * names an expert more than once gets that expert's output once per slot,
 * each scaled by its slot's weight (as vLLM). */
TAILOR_C_EXPORT tailor_status
tailor_moe_experts(tailor_runtime* runtime, const tailor_moe_experts_args* args,
                   tailor_moe_workspace* ws);

/* ---- FP8 (e4m3) MoE: tailor::moe::ScaleMode and the quantization args ---
 * New entries beside the bf16 / f32 ones (their structs are unchanged).
 * Scale tensors are f32; shapes per mode as in tailor/ops/moe.h. */
typedef enum tailor_moe_scale_mode {
  TAILOR_MOE_SCALE_NONE = 0,
  TAILOR_MOE_SCALE_PER_TENSOR = 1,
  TAILOR_MOE_SCALE_PER_CHANNEL = 2,
  TAILOR_MOE_SCALE_BLOCK = 3, /* W 128 x 128, activations 1 x 128 */
} tailor_moe_scale_mode;

/* tailor::moe::ExpertsQuantization. block_shape {0, 0} means {128, 128}. */
typedef struct tailor_moe_experts_quantization {
  int32_t mode;                  /* tailor_moe_scale_mode */
  tailor_tensor w13_scale;       /* [E] | [E, 2I] | [E, 2I/128, H/128] */
  tailor_tensor w2_scale;        /* [E] | [E, H] | [E, H/128, I/128] */
  const tailor_tensor* a1_scale; /* [1] (per tensor), or NULL */
  const tailor_tensor* a2_scale; /* [1] (per tensor), or NULL */
  int64_t block_shape[2];        /* [block_n, block_k] */
} tailor_moe_experts_quantization;

/* tailor::moe::Experts with FP8 weights: args->w13 / w2 are
 * TAILOR_DTYPE_F8E4M3, scaled by `quant` (NULL: tailor_moe_experts). */
TAILOR_C_EXPORT tailor_status tailor_moe_experts_quantized(
    tailor_runtime* runtime, const tailor_moe_experts_args* args,
    const tailor_moe_experts_quantization* quant, tailor_moe_workspace* ws);

/* tailor::moe::GemmQuantization. block_shape {0, 0} means {128, 128}. */
typedef struct tailor_moe_gemm_quantization {
  int32_t mode;           /* tailor_moe_scale_mode */
  tailor_tensor a_scale;  /* [1] | [R] | [K/128, R] */
  tailor_tensor w_scale;  /* [E] | [E, N] | [E, N/128, K/128] */
  tailor_tensor c_scale;  /* [N/2/128, R] when c is e4m3, else unset */
  int64_t block_shape[2]; /* [block_n, block_k] */
} tailor_moe_gemm_quantization;

/* tailor::moe::GroupedGemm with e4m3 a and w, scaled by `quant` (NULL:
 * tailor_moe_grouped_gemm). */
TAILOR_C_EXPORT tailor_status tailor_moe_grouped_gemm_quantized(
    tailor_runtime* runtime, const tailor_moe_grouped_gemm_args* args,
    const tailor_moe_gemm_quantization* quant, const tailor_moe_workspace* ws);

/* ---- attention: paged decode (tailor/ops/attention.h) --------------------
 * Plan once per step on the host (seq_lens in host memory), run every layer
 * (on a device: asynchronously on `stream`, capturable in a CUDA graph). */

typedef struct tailor_attention_decode_workspace
    tailor_attention_decode_workspace;

/* tailor::attention::DecodeLimits. */
typedef struct tailor_attention_decode_limits {
  int64_t max_batch;
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim;  /* 64, 128 or 256 */
  int64_t page_size; /* [1, 256] */
  int32_t dtype;     /* TAILOR_DTYPE_BF16 or _F16; 0: bf16 */
} tailor_attention_decode_limits;

/* A new, empty decode workspace in *out (tailor::attention::DecodeWorkspace).
 * Not thread-safe: one per thread or stream. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_workspace_create(
    tailor_attention_decode_workspace** out);
/* NULL is a no-op. Never fails. */
TAILOR_C_EXPORT void tailor_attention_decode_workspace_destroy(
    tailor_attention_decode_workspace* ws);

/* tailor::attention::ReserveDecodeWorkspace. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_workspace_reserve(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    tailor_attention_decode_workspace* ws);
/* tailor::attention::DecodeWorkspaceBytes, into *bytes. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_workspace_bytes(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    int64_t* bytes);
/* tailor::attention::BindDecodeWorkspace. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_workspace_bind(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    void* memory, int64_t bytes, tailor_attention_decode_workspace* ws,
    void* stream);
/* tailor::attention::DecodeWorkspace::TakeErrors; waits for `stream`. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_workspace_take_errors(
    tailor_runtime* runtime, tailor_attention_decode_workspace* ws,
    void* stream);

/* DecodeWorkspace's accessors and its DecodePlanSummary. */
typedef struct tailor_attention_decode_workspace_info {
  int32_t planned;
  int32_t workers; /* CUDA: CTAs of the grid; CPU: tasks */
  int64_t batch;   /* B of the last plan */
  int64_t capacity_bytes;
  int32_t busy_workers;
  int32_t items;       /* pieces run */
  int32_t split_pairs; /* (sequence, KV head) pairs split into pieces */
  int32_t partials;    /* pieces merged by log-sum-exp */
  int64_t tokens;      /* KV tokens read, times KV heads */
  int64_t max_worker_cost;
  double mean_worker_cost;
} tailor_attention_decode_workspace_info;

TAILOR_C_EXPORT tailor_status tailor_attention_decode_workspace_get_info(
    const tailor_attention_decode_workspace* ws,
    tailor_attention_decode_workspace_info* out);

typedef struct tailor_attention_decode_plan_args {
  tailor_tensor seq_lens; /* [B] i32 in HOST memory */
  int64_t page_size;
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int32_t dtype; /* TAILOR_DTYPE_BF16 or _F16; 0: bf16 */
  void* stream;  /* device backends: the work list is copied here */
} tailor_attention_decode_plan_args;

/* tailor::attention::PlanDecode. Any error (a null `args` too) leaves `ws`
 * not planned, so a run fails instead of using an earlier plan. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_plan(
    tailor_runtime* runtime, const tailor_attention_decode_plan_args* args,
    tailor_attention_decode_workspace* ws);

typedef struct tailor_attention_decode_run_args {
  tailor_tensor q;           /* [B', Hq, D] bf16 | f16 */
  tailor_tensor k_cache;     /* [num_pages, page_size, Hkv, D] */
  tailor_tensor v_cache;     /* [num_pages, page_size, Hkv, D] */
  tailor_tensor block_table; /* [B', max_pages] i32 */
  tailor_tensor seq_lens;    /* [B'] i32 on the runtime's device */
  tailor_tensor out;         /* [B', Hq, D] */
  const tailor_tensor* lse;  /* [B', Hq] f32, or NULL */
  float sm_scale;            /* > 0; 0: 1 / sqrt(D) */
  float logits_soft_cap;     /* >= 0; 0: no cap */
  void* stream;
} tailor_attention_decode_run_args;

/* tailor::attention::RunDecode. */
TAILOR_C_EXPORT tailor_status tailor_attention_decode_run(
    tailor_runtime* runtime, const tailor_attention_decode_run_args* args,
    tailor_attention_decode_workspace* ws);

/* ---- attention: ragged (tailor/ops/attention.h) ---------------------------
 * Every row kind of a serving step in one plan: prefill, chunked prefill over
 * cached prefixes, speculative and decode rows. Plan once per step from host
 * metadata (vLLM's query_start_loc + seq_lens, or FlashInfer's qo_indptr +
 * kv_indptr + kv_last_page_len), run every layer. */

typedef struct tailor_attention_ragged_workspace
    tailor_attention_ragged_workspace;

/* Which positions a query token attends (tailor::attention's causal and
 * window_left): zero is causal, the serving default. */
typedef enum tailor_attention_mask {
  TAILOR_ATTENTION_MASK_CAUSAL = 0, /* positions <= its own */
  TAILOR_ATTENTION_MASK_NONE = 1,   /* every KV position */
  /* causal, and positions >= its own - window_left (FlashInfer's
   * window_left; vLLM's window_size (window_left, 0)) */
  TAILOR_ATTENTION_MASK_WINDOW = 2,
} tailor_attention_mask;

/* tailor::attention::RaggedLimits. */
typedef struct tailor_attention_ragged_limits {
  int64_t max_batch;  /* B of the largest plan */
  int64_t max_tokens; /* sum of q_len of the largest plan */
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim;    /* 64, 128 or 256 */
  int64_t page_size;   /* [1, 256] */
  int32_t dtype;       /* TAILOR_DTYPE_BF16 or _F16; 0: bf16 */
  int32_t mask;        /* tailor_attention_mask */
  int64_t window_left; /* >= 0 with TAILOR_ATTENTION_MASK_WINDOW, else 0 */
} tailor_attention_ragged_limits;

/* A new, empty ragged workspace in *out (tailor::attention::RaggedWorkspace).
 * Not thread-safe: one per thread or stream. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_create(
    tailor_attention_ragged_workspace** out);
/* NULL is a no-op. Never fails. */
TAILOR_C_EXPORT void tailor_attention_ragged_workspace_destroy(
    tailor_attention_ragged_workspace* ws);

/* tailor::attention::ReserveRaggedWorkspace. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_reserve(
    tailor_runtime* runtime, const tailor_attention_ragged_limits* limits,
    tailor_attention_ragged_workspace* ws);
/* tailor::attention::RaggedWorkspaceBytes, into *bytes (0 on the host). */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_bytes(
    tailor_runtime* runtime, const tailor_attention_ragged_limits* limits,
    int64_t* bytes);
/* tailor::attention::BindRaggedWorkspace. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_bind(
    tailor_runtime* runtime, const tailor_attention_ragged_limits* limits,
    void* memory, int64_t bytes, tailor_attention_ragged_workspace* ws,
    void* stream);
/* tailor::attention::RaggedWorkspace::TakeErrors; waits for `stream`. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_take_errors(
    tailor_runtime* runtime, tailor_attention_ragged_workspace* ws,
    void* stream);

/* RaggedWorkspace's accessors and its RaggedPlanSummary. */
typedef struct tailor_attention_ragged_workspace_info {
  int32_t planned;
  int32_t workers; /* CUDA: CTAs of the grid; CPU: tasks */
  int64_t batch;   /* B of the last plan */
  int64_t total_q; /* sum of q_len of the last plan */
  int64_t capacity_bytes;
  int32_t tiles;        /* query tiles before splitting */
  int32_t items;        /* pieces run */
  int32_t tail_tiles;   /* tiles with fewer rows than a full tile */
  int32_t masked_tiles; /* tiles with masked KV blocks */
  int32_t split_tiles;  /* tiles in pieces merged by log-sum-exp */
  int32_t partials;     /* partial slots used */
  int32_t busy_workers;
  int32_t tile_rows; /* packed rows per tile */
  int32_t head_pack; /* query heads packed into a tile's rows */
  int32_t reserved;  /* 0 */
  int64_t max_worker_cost;
  double mean_worker_cost;
} tailor_attention_ragged_workspace_info;

TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_get_info(
    const tailor_attention_ragged_workspace* ws,
    tailor_attention_ragged_workspace_info* out);

/* The decode rows of the last plan (RaggedPlanSummary's decode_seqs and
 * decode_items): sequences of q_len 1 that run on the paged-decode kernel
 * (CUDA; 0 on backends that keep them in query tiles), and that kernel's
 * work items. All zeros for a workspace that was not planned. A struct and
 * entry of their own rather than fields of the info above, whose size
 * callers built against this ABI already allocate. */
typedef struct tailor_attention_ragged_decode_info {
  int32_t seqs;
  int32_t items;
} tailor_attention_ragged_decode_info;

TAILOR_C_EXPORT tailor_status tailor_attention_ragged_workspace_get_decode_info(
    const tailor_attention_ragged_workspace* ws,
    tailor_attention_ragged_decode_info* out);

typedef struct tailor_attention_ragged_plan_args {
  tailor_tensor q_indptr; /* [B + 1] i32 HOST (vLLM: query_start_loc) */
  tailor_tensor kv_lens;  /* [B] i32 HOST (vLLM: seq_lens) */
  int64_t page_size;
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int32_t dtype;       /* TAILOR_DTYPE_BF16 or _F16; 0: bf16 */
  int32_t mask;        /* tailor_attention_mask */
  int64_t window_left; /* >= 0 with TAILOR_ATTENTION_MASK_WINDOW, else 0 */
  void* stream;        /* device backends: the plan is copied here */
} tailor_attention_ragged_plan_args;

/* tailor::attention::PlanRagged. Any error (a null `args` too) leaves `ws`
 * not planned, so a run fails instead of using an earlier plan. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_plan(
    tailor_runtime* runtime, const tailor_attention_ragged_plan_args* args,
    tailor_attention_ragged_workspace* ws);

typedef struct tailor_attention_ragged_plan_flashinfer_args {
  tailor_tensor qo_indptr;        /* [B + 1] i32 HOST */
  tailor_tensor kv_indptr;        /* [B + 1] i32 HOST: pages of each */
  tailor_tensor kv_last_page_len; /* [B] i32 HOST */
  int64_t page_size;
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int32_t dtype;       /* TAILOR_DTYPE_BF16 or _F16; 0: bf16 */
  int32_t mask;        /* tailor_attention_mask */
  int64_t window_left; /* >= 0 with TAILOR_ATTENTION_MASK_WINDOW, else 0 */
  void* stream;
} tailor_attention_ragged_plan_flashinfer_args;

/* tailor::attention::PlanRaggedFlashInfer; errors as
 * tailor_attention_ragged_plan. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_plan_flashinfer(
    tailor_runtime* runtime,
    const tailor_attention_ragged_plan_flashinfer_args* args,
    tailor_attention_ragged_workspace* ws);

typedef struct tailor_attention_ragged_run_args {
  tailor_tensor q;       /* [sum q', Hq, D] bf16 | f16 */
  tailor_tensor k_cache; /* [num_pages, page_size, Hkv, D] */
  tailor_tensor v_cache; /* [num_pages, page_size, Hkv, D] */
  /* [B', max_pages] i32 (vLLM's block_table), or [nnz] i32 (FlashInfer's
   * kv_indices) with page_indptr set */
  tailor_tensor block_table;
  const tailor_tensor* page_indptr; /* [B' + 1] i32 (kv_indptr), or NULL */
  const tailor_tensor* kv_lens;     /* [B'] i32 on the device, or NULL */
  tailor_tensor out;                /* [sum q', Hq, D] */
  const tailor_tensor* lse;         /* [sum q', Hq] f32, or NULL */
  float sm_scale;                   /* > 0; 0: 1 / sqrt(D) */
  float logits_soft_cap;            /* >= 0; 0: no cap */
  void* stream;
} tailor_attention_ragged_run_args;

/* tailor::attention::RunRagged. */
TAILOR_C_EXPORT tailor_status tailor_attention_ragged_run(
    tailor_runtime* runtime, const tailor_attention_ragged_run_args* args,
    tailor_attention_ragged_workspace* ws);

/* ---- deprecated names (removed in TAILOR_C_API_VERSION 4) ---------------
 * The entries and types above under the names they had before one naming
 * scheme covered every family. The functions are exported symbols that
 * forward to the new ones (same arguments, same results); the types are
 * the new types under their old names. */

typedef tailor_attention_decode_workspace tailor_decode_workspace
    TAILOR_C_DEPRECATED("tailor_attention_decode_workspace");
typedef tailor_attention_decode_limits tailor_decode_limits
    TAILOR_C_DEPRECATED("tailor_attention_decode_limits");
typedef tailor_attention_decode_workspace_info tailor_decode_workspace_info
    TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_info");
typedef tailor_attention_decode_plan_args tailor_plan_decode_args
    TAILOR_C_DEPRECATED("tailor_attention_decode_plan_args");
typedef tailor_attention_decode_run_args tailor_run_decode_args
    TAILOR_C_DEPRECATED("tailor_attention_decode_run_args");

TAILOR_C_DEPRECATED("tailor_moe_workspace_reserve")
TAILOR_C_EXPORT tailor_status tailor_moe_reserve_workspace(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    tailor_moe_workspace* ws);
TAILOR_C_DEPRECATED("tailor_moe_workspace_bind")
TAILOR_C_EXPORT tailor_status tailor_moe_bind_workspace(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    void* memory, int64_t bytes, tailor_moe_workspace* ws, void* stream);
TAILOR_C_DEPRECATED("tailor_moe_workspace_take_errors")
TAILOR_C_EXPORT tailor_status tailor_moe_take_routing_errors(
    tailor_runtime* runtime, tailor_moe_workspace* ws, void* stream);

TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_create")
TAILOR_C_EXPORT tailor_status
tailor_decode_workspace_create(tailor_attention_decode_workspace** out);
TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_destroy")
TAILOR_C_EXPORT void tailor_decode_workspace_destroy(
    tailor_attention_decode_workspace* ws);
TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_reserve")
TAILOR_C_EXPORT tailor_status tailor_attention_reserve_decode_workspace(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    tailor_attention_decode_workspace* ws);
TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_bind")
TAILOR_C_EXPORT tailor_status tailor_attention_bind_decode_workspace(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    void* memory, int64_t bytes, tailor_attention_decode_workspace* ws,
    void* stream);
TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_take_errors")
TAILOR_C_EXPORT tailor_status tailor_attention_take_decode_errors(
    tailor_runtime* runtime, tailor_attention_decode_workspace* ws,
    void* stream);
TAILOR_C_DEPRECATED("tailor_attention_decode_workspace_get_info")
TAILOR_C_EXPORT tailor_status
tailor_decode_workspace_get_info(const tailor_attention_decode_workspace* ws,
                                 tailor_attention_decode_workspace_info* out);
TAILOR_C_DEPRECATED("tailor_attention_decode_plan")
TAILOR_C_EXPORT tailor_status tailor_attention_plan_decode(
    tailor_runtime* runtime, const tailor_attention_decode_plan_args* args,
    tailor_attention_decode_workspace* ws);
TAILOR_C_DEPRECATED("tailor_attention_decode_run")
TAILOR_C_EXPORT tailor_status tailor_attention_run_decode(
    tailor_runtime* runtime, const tailor_attention_decode_run_args* args,
    tailor_attention_decode_workspace* ws);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TAILOR_C_API_H_ */
