/* bench/attention_gpu/dev_api.h — the C ABI of the ragged-attention
 * development library (libtailor_attention_dev.so): the host planner
 * (src/plan/attention_plan.h) and the Hopper kernels (kernels.cu), driven
 * from Python (bench/attention_gpu/run.py, ctypes) on tensors the caller
 * owns. It is a bench harness, not tailor's API: no workspace management, no
 * JIT, no cache; every device pointer comes from the caller.
 *
 * Every function returns 0 on success, else writes a message naming the
 * argument and the rule into `error` (error_len bytes) and returns nonzero.
 *
 * Flow:
 *   tad_plan_build(q_lens, kv_lens, ...)  -> host plan (TadPlan)
 *   tad_plan_info / tad_plan_copy          -> sizes; items, worker_begin and
 *                                             merge groups into host arrays
 *   (the caller copies them to the device)
 *   tad_prepare(run args)                  -> tensor maps and params, once
 *   tad_launch(prepared, stream)           -> the kernel (+ the merge)
 */
#ifndef TAILOR_BENCH_ATTENTION_GPU_DEV_API_H_
#define TAILOR_BENCH_ATTENTION_GPU_DEV_API_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TadPlan TadPlan;
typedef struct TadPrepared TadPrepared;

typedef struct {
  int num_qo_heads;     /* Hq */
  int num_kv_heads;     /* Hkv, dividing Hq */
  int head_dim;         /* 64, 128, 256: picks the KV block */
  int pack;             /* query heads packed into a tile's rows */
  int causal;           /* 0 / 1 */
  int window_left;      /* -1: none */
  int num_workers;      /* CTAs; 0: the device's SM count */
  int max_pieces;       /* 0: the planner's default; 1: never split */
  int min_piece_blocks; /* 0: the planner's default */
} TadPlanArgs;

typedef struct {
  int items, workers, merge_groups, partials;
  int tiles, tail_tiles, masked_tiles, split_tiles, busy_workers;
  int kv_block, tile_rows, item_bytes, merge_bytes;
  long long total_q, blocks, masked_blocks, useful_rows, executed_rows;
  long long max_worker_cost;
  double mean_worker_cost;
} TadPlanInfo;

int tad_plan_build(const int* q_lens, const int* kv_lens, int batch,
                   const TadPlanArgs* args, TadPlan** plan, char* error,
                   int error_len);
int tad_plan_info(const TadPlan* plan, TadPlanInfo* info);
/* items: info.items x item_bytes; worker_begin: workers + 1 ints;
 * merge_groups: info.merge_groups x merge_bytes (may be null when 0). */
int tad_plan_copy(const TadPlan* plan, void* items, int* worker_begin,
                  void* merge_groups);
void tad_plan_free(TadPlan* plan);

typedef struct {
  int dtype; /* 0 bf16, 1 f16 */
  int head_dim, pack, page_size, num_qo_heads, num_kv_heads;
  /* q [q_tokens, Hq, D], last dim contiguous; strides in elements */
  const void* q;
  long long q_tokens, q_stride_token, q_stride_head;
  /* k / v caches [num_pages, page_size, Hkv, D], last dim contiguous */
  const void* k_cache;
  const void* v_cache;
  long long num_pages;
  long long k_stride_page, k_stride_token, k_stride_head;
  long long v_stride_page, v_stride_token, v_stride_head;
  const int* block_table; /* [B, max_pages] */
  long long block_table_stride;
  int max_pages;
  void* out; /* [q_tokens, Hq, D] */
  long long out_stride_token, out_stride_head;
  float* lse; /* [q_tokens, Hq] natural log, or null */
  long long lse_stride_token;
  /* the plan on the device (tad_plan_copy's arrays) */
  const void* items;
  const int* worker_begin;
  int num_workers;
  const void* merge_groups;
  const int* merge_count;     /* device int: the number of merge groups */
  int merge_grid;             /* CTAs of the merge launch; 0: no merge launch */
  float* partial_out;         /* [partials, 128, D] f32 */
  float* partial_lse;         /* [partials, 128] f32 */
  unsigned long long* errors; /* [1], all ones before a run */
  float sm_scale;
  float soft_cap; /* 0: none */
  int causal, window_left;
  int design; /* kernel_table.h: 0 the current prefill kernel; for A/B runs
                 (bf16, D 128, packs 4 and 8, pages of 16): 1 the previous
                 design, 2 the current one without the softmax overlap */
} TadRunArgs;

int tad_prepare(const TadRunArgs* args, TadPrepared** prepared, char* error,
                int error_len);
/* stream: a cudaStream_t (torch.cuda.current_stream().cuda_stream). */
int tad_launch(const TadPrepared* prepared, void* stream, char* error,
               int error_len);
void tad_prepared_free(TadPrepared* prepared);

/* ---- decode rows on tailor's decode kernel (dev_decode.cc) ----
 * The decode family's Hopper kernel (templates/cuda/attention/decode_sm90.cuh)
 * over rows of q_len 1: a mixed batch runs its prefill rows on the prefill
 * kernel and its decode rows here, two launches from one host plan. The plan
 * config mirrors the CUDA backend's decode rules (CTAs per SM, depth, head
 * groups, L2 evict-first) without thread-block clusters.
 *
 *   tad_decode_plan_build(seq_lens, ...) -> TadDecodePlan
 *   tad_decode_plan_info / tad_decode_plan_copy -> work list for the device
 *   tad_decode_prepare(run args) / tad_decode_launch(prepared, stream) */
typedef struct TadDecodePlan TadDecodePlan;
typedef struct TadDecodePrepared TadDecodePrepared;

typedef struct {
  int num_qo_heads, num_kv_heads, head_dim, page_size;
  int workers_per_sm; /* 0: the decode family's rule; else 1 or 2 */
  int head_group;     /* 0: the rule; 1: never; 4: always where it fits */
} TadDecodePlanArgs;

typedef struct {
  int items, workers, partials, stages, head_group, launch_flags;
  int busy_workers, split_pairs, item_bytes;
  long long max_worker_cost;
  double mean_worker_cost;
} TadDecodePlanInfo;

int tad_decode_plan_build(const int* seq_lens, int batch,
                          const TadDecodePlanArgs* args, TadDecodePlan** plan,
                          char* error, int error_len);
int tad_decode_plan_info(const TadDecodePlan* plan, TadDecodePlanInfo* info);
/* items: info.items x item_bytes; first_items: workers x item_bytes;
 * worker_begin: workers + 2 ints (the last one: the launch flags). */
int tad_decode_plan_copy(const TadDecodePlan* plan, void* items,
                         void* first_items, int* worker_begin);
void tad_decode_plan_free(TadDecodePlan* plan);

typedef struct {
  int dtype, head_dim, group, page_size, num_kv_heads, stages, head_groups;
  /* q / out [B, Hq, D], last dim contiguous; strides in elements */
  const void* q;
  long long q_stride_b, q_stride_h;
  const void* k_cache;
  const void* v_cache;
  long long num_pages;
  long long k_stride_page, k_stride_token, k_stride_head;
  long long v_stride_page, v_stride_token, v_stride_head;
  const int* block_table; /* [B, max_pages] */
  long long block_table_stride;
  int max_pages;
  const int* seq_lens; /* [B] device lengths (the plan's) */
  void* out;
  long long out_stride_b, out_stride_h;
  float* lse; /* [B, Hq] or null */
  long long lse_stride_b;
  const void* items;
  const void* first_items;
  const int* worker_begin;
  int num_workers;
  void* partial_out;  /* [partials, group, D] 16-bit */
  float* partial_lse; /* [partials, group] */
  void* scratch;      /* tad_decode_scratch_bytes: counters zeroed, then the
                         error words all ones */
  int partials;
  float sm_scale;
} TadDecodeRunArgs;

int tad_decode_prepare(const TadDecodeRunArgs* args,
                       TadDecodePrepared** prepared, char* error,
                       int error_len);
int tad_decode_launch(const TadDecodePrepared* prepared, void* stream,
                      char* error, int error_len);
void tad_decode_prepared_free(TadDecodePrepared* prepared);
/* Bytes of the scratch for `partials` slots; the error words' offset. */
long long tad_decode_scratch_bytes(int partials);
long long tad_decode_error_offset(int partials);

/* The device's multiprocessor count (the default worker count). */
int tad_sm_count(void);
/* The compiled variants, one "dtype d pack page" a line; static storage. */
const char* tad_variants(void);
/* 1 when built with the pipeline protocol checks. */
int tad_pipeline_checks(void);

#ifdef __cplusplus
}
#endif

#endif /* TAILOR_BENCH_ATTENTION_GPU_DEV_API_H_ */
