/* Example 02: one MoE layer from C, through the C ABI (tailor/c_api.h).
 *
 *   1. check the library's ABI version and create a CPU runtime
 *   2. reserve a MoE workspace for the largest step
 *   3. run vLLM's fused_experts (tailor_moe_experts) on a small f32 layer
 *   4. compare with a plain C reference, show an error, print the stats
 *
 * Build against an installed tailor:
 *   cc 02_c_api.c $(pkg-config --cflags --libs tailor_c) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tailor/c_api.h"

enum { T = 5, H = 32, I = 16, E = 4, K = 2 };

static float w13[E][2 * I][H], w2[E][H][I], hidden[T][H], out[T][H];
static float topk_weights[T][K];
static int32_t topk_ids[T][K];

static float Silu(float x) { return x / (1.0f + expf(-x)); }

/* out[t] = sum_j weight[t][j] * w2[e] . silu_and_mul(w13[e] . hidden[t]) */
static double ReferenceError(void) {
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      double sum = 0;
      for (int j = 0; j < K; ++j) {
        const int e = topk_ids[t][j];
        double y = 0;
        for (int i = 0; i < I; ++i) {
          float gate = 0, up = 0;
          for (int x = 0; x < H; ++x) {
            gate += w13[e][i][x] * hidden[t][x];
            up += w13[e][I + i][x] * hidden[t][x];
          }
          y += w2[e][h][i] * Silu(gate) * up;
        }
        sum += topk_weights[t][j] * y;
      }
      double err = fabs(sum - out[t][h]);
      if (err > worst) worst = err;
    }
  }
  return worst;
}

static void Fill(float* p, int n, float scale) {
  for (int i = 0; i < n; ++i)
    p[i] = scale * ((float)(rand() % 2001) / 1000 - 1);
}

static int Fail(const char* what, tailor_status status) {
  fprintf(stderr, "%s failed: %s: %s\n", what, tailor_status_name(status),
          tailor_last_error());
  return 1;
}

int main(void) {
  /* 1. The library loaded must speak this header's ABI. */
  if (tailor_c_api_version() != TAILOR_C_API_VERSION) {
    fprintf(stderr, "libtailor_c speaks ABI %u, this program %d\n",
            tailor_c_api_version(), TAILOR_C_API_VERSION);
    return 1;
  }
  tailor_runtime_options options = {0};
  options.backend = TAILOR_BACKEND_CPU;
  options.log_level = "warn";
  tailor_runtime* runtime = NULL;
  tailor_status s = tailor_runtime_create(&options, &runtime);
  if (s != TAILOR_STATUS_OK) return Fail("tailor_runtime_create", s);
  tailor_runtime_info info;
  tailor_runtime_get_info(runtime, &info);
  printf("tailor %s, backend cpu, arch %s\n", tailor_version(), info.arch);

  /* 2. A workspace sized once for steps of up to 64 tokens. */
  tailor_moe_workspace* ws = NULL;
  if ((s = tailor_moe_workspace_create(&ws)) != TAILOR_STATUS_OK)
    return Fail("tailor_moe_workspace_create", s);
  tailor_moe_workspace_limits limits = {0};
  limits.max_tokens = 64;
  limits.topk = K;
  limits.num_experts = E;
  limits.hidden = H;
  limits.intermediate = I;
  limits.dtype = TAILOR_DTYPE_F32;
  if ((s = tailor_moe_workspace_reserve(runtime, &limits, ws)) !=
      TAILOR_STATUS_OK)
    return Fail("tailor_moe_workspace_reserve", s);

  /* 3. One step: T tokens, each routed to K of E experts. */
  srand(7);
  Fill(&w13[0][0][0], E * 2 * I * H, 0.2f);
  Fill(&w2[0][0][0], E * H * I, 0.2f);
  Fill(&hidden[0][0], T * H, 1.0f);
  for (int t = 0; t < T; ++t) {
    topk_ids[t][0] = t % E;
    topk_ids[t][1] = (t + 1 + t / 2) % E;
    topk_weights[t][0] = 0.75f;
    topk_weights[t][1] = 0.25f;
  }
  const int64_t hidden_dims[2] = {T, H}, w13_dims[3] = {E, 2 * I, H},
                w2_dims[3] = {E, H, I}, topk_dims[2] = {T, K};
  tailor_moe_experts_args args = {0};
  args.hidden =
      tailor_tensor_contiguous(hidden, TAILOR_DTYPE_F32, 2, hidden_dims);
  args.w13 = tailor_tensor_contiguous(w13, TAILOR_DTYPE_F32, 3, w13_dims);
  args.w2 = tailor_tensor_contiguous(w2, TAILOR_DTYPE_F32, 3, w2_dims);
  args.topk_weights =
      tailor_tensor_contiguous(topk_weights, TAILOR_DTYPE_F32, 2, topk_dims);
  args.topk_ids =
      tailor_tensor_contiguous(topk_ids, TAILOR_DTYPE_I32, 2, topk_dims);
  args.out = tailor_tensor_contiguous(out, TAILOR_DTYPE_F32, 2, hidden_dims);
  if ((s = tailor_moe_experts(runtime, &args, ws)) != TAILOR_STATUS_OK)
    return Fail("tailor_moe_experts", s);

  /* 4. Check it, then show what a bad argument reports. */
  double error = ReferenceError();
  tailor_moe_workspace_info ws_info;
  tailor_moe_workspace_get_info(ws, &ws_info);
  printf(
      "experts: T=%d rows=%lld core_tiles=%d tail_pieces=%d max abs err %.2e\n",
      T, (long long)ws_info.num_rows, ws_info.core_tiles, ws_info.tail_pieces,
      error);
  topk_ids[2][1] = E + 3;
  s = tailor_moe_experts(runtime, &args, ws);
  printf("bad expert id -> %s: %s\n", tailor_status_name(s),
         tailor_last_error());

  char* prometheus = NULL;
  if (tailor_runtime_stats(runtime, TAILOR_STATS_PROMETHEUS, &prometheus) ==
      TAILOR_STATUS_OK) {
    printf("%.*s...\n", 200, prometheus);
  }
  tailor_string_free(prometheus);
  tailor_moe_workspace_destroy(ws);
  tailor_runtime_destroy(runtime);
  return error < 1e-3 && s == TAILOR_STATUS_INVALID_ARGUMENT ? 0 : 1;
}
