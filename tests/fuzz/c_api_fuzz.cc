// Fuzzes the C ABI (include/tailor/c_api.h): every tailor_* entry, with the
// arguments a C caller can get wrong. Each input is a sequence of calls on
// one MoE workspace and one decode workspace: runtime creation with fuzzed
// options, tensor views built with tailor_tensor_contiguous, workspace
// reservation, binding and info, Route / Pack / GroupedGemm / Combine /
// Experts, PlanDecode / RunDecode, stats. Arguments start as what the entry
// expects and are then (sometimes) broken: null handles, null args and
// out-pointers, enum fields out of range (dtype, device type, backend,
// policy.tail, epilogue, activation, stats format), ranks outside
// [0, TAILOR_MAX_RANK], several dims and strides at once (edge values),
// misaligned data, index contents out of range, limits out of range, NaN or
// negative scales (c_tensors.h). Unlike moe_api_fuzz (the C++ API, one
// break per tensor) it also reaches valid_tokens and paged decode.
//
// What must hold, per c_api.h and the C++ headers it mirrors:
//   - every entry returns a tailor_status from its documented set, which
//     tailor_status_name knows; tailor_last_error() is "" after OK and a
//     message otherwise; a null handle, args or out-pointer is
//     INVALID_ARGUMENT;
//   - an op that fails launches nothing and writes no output, and an
//     INVALID_ARGUMENT is decided before any kernel lookup;
//   - a failed create leaves *out NULL; a failed Route / PlanDecode leaves
//     its workspace not routed / not planned (get_info);
//   - RunDecode leaves rows of out and lse past the plan's batch untouched;
//   - no kernel or host code reads or writes outside the tensors it is
//     given (guarded memory; ASan and UBSan in `make fuzz`).
// As in moe_api_fuzz, calls whose tensors all have memory and whose
// compiled-in values lie in small tables run on a JIT runtime whose kernels
// are cached on disk ($TAILOR_FUZZ_CACHE_DIR), so the kernel set stays
// bounded; other calls run on a runtime with disable_jit, which checks
// everything and runs nothing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "c_api_checks.h"
#include "c_tensors.h"
#include "fuzz_input.h"
#include "tailor/c_api.h"

namespace tailor::fuzz {
namespace {

constexpr int32_t kTileRows = 4;  // the tile of bounded (JIT) MoE calls
constexpr int64_t kMaxWorkspaceBytes = int64_t{64} << 20;
constexpr int64_t kHeadDim = 64;  // the head_dim of bounded decode calls

// ---- MoE --------------------------------------------------------------------

// The MoE layer one input works in (as moe_api_fuzz's: bounded dims).
struct MoeModel {
  int32_t dtype;
  int64_t tokens, topk, experts, hidden, intermediate;
  tailor_moe_routing_policy policy;
};

MoeModel MakeMoeModel(FuzzInput& in) {
  MoeModel m = {.dtype = in.Bool() ? TAILOR_DTYPE_BF16 : TAILOR_DTYPE_F32,
                .tokens = in.InRange(0, 24),
                .topk = in.InRange(1, 4),
                .experts = in.InRange(1, 6),
                .hidden = in.Bool() ? 8 : 16,
                .intermediate = 8,
                .policy = {.tile_rows = kTileRows,
                           .tail = static_cast<int32_t>(in.InRange(0, 2))}};
  // Route refuses k > E (a token's k experts are distinct): keep the model
  // valid so that inputs reach the later ops; k > E still comes from the
  // num_experts and expert_map edge values.
  m.topk = std::min(m.topk, m.experts);
  return m;
}

bool InModelTable(int64_t d) { return d == 8 || d == 16; }

tailor_moe_routing_policy Policy(FuzzInput& in, const MoeModel& m) {
  tailor_moe_routing_policy policy = m.policy;
  if (in.OneIn(12)) policy.tile_rows = static_cast<int32_t>(in.EdgeValue());
  if (in.OneIn(16)) policy.tail = in.Take<int32_t>();
  return policy;
}

tailor_moe_workspace_info MoeInfo(const tailor_moe_workspace* ws) {
  tailor_moe_workspace_info info = {};
  const tailor_status s = tailor_moe_workspace_get_info(ws, &info);
  FUZZ_CHECK(s == TAILOR_STATUS_OK) << tailor_last_error();
  return info;
}

// What get_info says of a routed workspace agrees with itself.
void CheckRouting(const tailor_moe_workspace_info& info) {
  const int64_t e = info.num_experts;
  FUZZ_CHECK(info.counts.rank == 1 && info.counts.dims[0] == e &&
             info.counts.dtype == TAILOR_DTYPE_I32);
  FUZZ_CHECK(info.offsets.rank == 1 && info.offsets.dims[0] == e + 1);
  FUZZ_CHECK(info.inverse.rank == 2 &&
             info.inverse.dims[0] == info.num_tokens &&
             info.inverse.dims[1] == info.topk);
  const auto* offsets = static_cast<const int32_t*>(info.offsets.data);
  FUZZ_CHECK(offsets[e] == info.num_rows) << offsets[e] << " " << info.num_rows;
  FUZZ_CHECK(info.permutation.rank == 1 &&
             info.permutation.dims[0] == info.num_rows);
}

// The GEMM records of `ws` agree with themselves whatever the steps before
// did: at most the last 2, none when not routed, each readable with a
// NUL-terminated kernel name, and the index past the last refused.
void CheckGemmRecords(const tailor_moe_workspace* ws) {
  int32_t count = -1;
  FUZZ_CHECK(tailor_moe_workspace_gemm_count(ws, &count) == TAILOR_STATUS_OK)
      << tailor_last_error();
  FUZZ_CHECK(count >= 0 && count <= 2) << count;
  if (!MoeInfo(ws).routed) FUZZ_CHECK(count == 0) << count;
  tailor_moe_gemm_choice g;
  for (int32_t i = 0; i < count; ++i) {
    std::memset(&g, 0xff, sizeof(g));
    FUZZ_CHECK(tailor_moe_workspace_get_gemm(ws, i, &g) == TAILOR_STATUS_OK)
        << tailor_last_error();
    FUZZ_CHECK(std::memchr(g.kernel, '\0', sizeof(g.kernel)) != nullptr);
  }
  FUZZ_CHECK(tailor_moe_workspace_get_gemm(ws, count, &g) ==
             TAILOR_STATUS_INVALID_ARGUMENT);
}

void RunRoute(CTensors& call, const MoeModel& m, tailor_moe_workspace* ws) {
  FuzzInput& in = call.in();
  tailor_moe_route_args args = {};
  int64_t id_limit = m.experts;
  tailor_tensor map, valid;
  if (in.OneIn(3)) {
    id_limit = in.InRange(1, 12);
    map = Entries(call, {id_limit}, -1, m.experts - 1);
    args.expert_map = &map;
  }
  if (in.OneIn(4)) {
    valid = Entries(call, {1}, 0, m.tokens);
    args.valid_tokens = &valid;
  }
  args.topk_ids = Entries(call, {m.tokens, m.topk}, 0, id_limit - 1);
  args.num_experts = in.OneIn(16) ? in.EdgeValue() : m.experts;
  args.policy = Policy(in, m);
  tailor_runtime* runtime = Pick(call, true);
  Nulls nulls(in);
  const Outcome route = CheckOp("tailor_moe_route", call, runtime, nulls, [&] {
    return tailor_moe_route(nulls.Maybe(runtime), nulls.Maybe(&args),
                            nulls.Maybe(ws));
  });
  if (nulls.any()) return;
  const tailor_moe_workspace_info info = MoeInfo(ws);
  FUZZ_CHECK(info.routed == route.ok())
      << "after tailor_moe_route: " << route.message;
  if (route.ok()) CheckRouting(info);
}

void RunPack(CTensors& call, const MoeModel& m, tailor_moe_workspace* ws) {
  FuzzInput& in = call.in();
  const tailor_moe_workspace_info info = MoeInfo(ws);
  const bool from_ws = info.routed && info.topk > 0 && in.Bool();
  const int64_t k = from_ws ? info.topk : m.topk;
  const int64_t tokens = from_ws ? info.num_tokens : m.tokens;
  tailor_moe_pack_args args = {};
  args.permutation =
      from_ws ? info.permutation
              : Entries(call, {in.InRange(0, 32)}, 0, tokens * k - 1);
  args.hidden = call.Float({tokens, m.hidden}, m.dtype);
  args.topk = in.OneIn(16) ? in.EdgeValue() : k;
  args.a = call.Float({args.permutation.dims[0], m.hidden}, m.dtype);
  call.Output(args.a);
  tailor_runtime* runtime = Pick(call, InModelTable(args.hidden.dims[1]));
  Nulls nulls(in);
  CheckOp("tailor_moe_pack", call, runtime, nulls, [&] {
    return tailor_moe_pack(nulls.Maybe(runtime), nulls.Maybe(&args));
  });
}

void RunGroupedGemm(CTensors& call, const MoeModel& m,
                    tailor_moe_workspace* ws) {
  FuzzInput& in = call.in();
  const tailor_moe_workspace_info info = MoeInfo(ws);
  const int64_t n = in.Bool() ? 8 : 16, k = in.Bool() ? 8 : 16;
  tailor_moe_grouped_gemm_args args = {};
  args.epilogue = in.OneIn(16) ? in.Take<int32_t>()
                               : static_cast<int32_t>(in.InRange(0, 1));
  const int64_t out =
      args.epilogue == TAILOR_MOE_EPILOGUE_SILU_AND_MUL ? n / 2 : n;
  args.a = call.Float({info.num_rows, k}, m.dtype);
  args.w = call.Float({info.num_experts, n, k}, m.dtype);
  args.c = call.Float({info.num_rows, out}, m.dtype);
  call.Output(args.c);
  const bool bounded = InModelTable(args.a.dims[1]) &&
                       InModelTable(args.w.dims[1]) &&
                       info.tile_rows == kTileRows;
  tailor_runtime* runtime = Pick(call, bounded);
  Nulls nulls(in);
  CheckOp("tailor_moe_grouped_gemm", call, runtime, nulls, [&] {
    return tailor_moe_grouped_gemm(nulls.Maybe(runtime), nulls.Maybe(&args),
                                   nulls.Maybe(ws));
  });
}

void RunCombine(CTensors& call, const MoeModel& m, tailor_moe_workspace* ws) {
  FuzzInput& in = call.in();
  const tailor_moe_workspace_info info = MoeInfo(ws);
  const bool from_ws = info.routed && info.topk > 0 && in.Bool();
  const int64_t tokens = from_ws ? info.num_tokens : m.tokens;
  const int64_t k = from_ws ? info.topk : m.topk;
  const int64_t rows = from_ws ? info.num_rows : in.InRange(0, 32);
  tailor_moe_combine_args args = {};
  args.c = call.Float({rows, m.hidden}, m.dtype);
  args.topk_weights = call.Float({tokens, k}, TAILOR_DTYPE_F32);
  args.inverse =
      from_ws ? info.inverse : Entries(call, {tokens, k}, -1, rows - 1);
  args.out = call.Float({tokens, m.hidden}, m.dtype);
  call.Output(args.out);
  const int64_t topk = args.topk_weights.dims[1];
  const bool bounded = InModelTable(args.c.dims[1]) && topk >= 1 && topk <= 4;
  tailor_runtime* runtime = Pick(call, bounded);
  Nulls nulls(in);
  CheckOp("tailor_moe_combine", call, runtime, nulls, [&] {
    return tailor_moe_combine(nulls.Maybe(runtime), nulls.Maybe(&args));
  });
}

void RunExperts(CTensors& call, const MoeModel& m, tailor_moe_workspace* ws) {
  FuzzInput& in = call.in();
  const int64_t t = m.tokens, h = m.hidden, i = m.intermediate;
  tailor_moe_experts_args args = {};
  args.hidden = call.Float({t, h}, m.dtype);
  args.w13 = call.Float({m.experts, 2 * i, h}, m.dtype);
  args.w2 = call.Float({m.experts, h, i}, m.dtype);
  args.topk_weights = call.Float({t, m.topk}, TAILOR_DTYPE_F32);
  args.topk_ids = Entries(call, {t, m.topk}, 0, m.experts - 1);
  tailor_tensor valid;
  if (in.OneIn(4)) {
    valid = Entries(call, {1}, 0, t);
    args.valid_tokens = &valid;
  }
  args.policy = Policy(in, m);
  if (in.OneIn(32)) args.activation = in.Take<int32_t>();
  args.out = in.OneIn(4) ? args.hidden : call.Float({t, h}, m.dtype);
  // moe.h: Experts keeps R x (H + 2I) elements, R <= T * k.
  auto u = [](int64_t v) -> unsigned __int128 { return v < 0 ? 0 : v; };
  if (u(args.topk_ids.dims[0]) * u(args.topk_ids.dims[1]) *
          (u(args.hidden.dims[1]) + u(args.w13.dims[1])) * 4 >
      static_cast<unsigned __int128>(kMaxWorkspaceBytes)) {
    return;
  }
  if (args.out.data != args.hidden.data) call.Output(args.out);
  const int64_t topk = args.topk_ids.dims[1];
  const bool bounded = InModelTable(args.hidden.dims[1]) &&
                       InModelTable(args.w13.dims[1] / 2) &&
                       args.w13.dims[1] % 2 == 0 && topk >= 1 && topk <= 4 &&
                       args.policy.tile_rows == kTileRows;
  tailor_runtime* runtime = Pick(call, bounded);
  Nulls nulls(in);
  CheckOp("tailor_moe_experts", call, runtime, nulls, [&] {
    return tailor_moe_experts(nulls.Maybe(runtime), nulls.Maybe(&args),
                              nulls.Maybe(ws));
  });
}

// Reserve, Bytes, Bind and TakeRoutingErrors on the host runtimes.
void RunMoeWorkspace(CTensors& call, const MoeModel& m,
                     tailor_moe_workspace* ws) {
  FuzzInput& in = call.in();
  auto pick = [&](int64_t usual) {
    return in.OneIn(8) ? in.EdgeValue() : usual;
  };
  tailor_moe_workspace_limits limits = {
      .max_tokens = pick(m.tokens),
      .topk = pick(m.topk),
      .num_experts = pick(m.experts),
      .hidden = pick(m.hidden),
      .intermediate = pick(m.intermediate),
      .dtype = in.OneIn(16) ? in.Take<int32_t>() : m.dtype,
      .policy = Policy(in, m)};
  auto u = [](int64_t v) -> unsigned __int128 { return v < 0 ? 0 : v; };
  const unsigned __int128 need =
      u(limits.max_tokens) * u(limits.topk) *
          (u(limits.hidden) + u(limits.intermediate) + 4) * 4 +
      u(limits.num_experts) * 32;
  if (need > static_cast<unsigned __int128>(kMaxWorkspaceBytes)) return;
  tailor_runtime* runtime = Pick(call, false);  // host buffers only
  Nulls nulls(in);
  switch (in.InRange(0, 3)) {
    case 0:
      CheckOp("tailor_moe_workspace_reserve", call, runtime, nulls, [&] {
        return tailor_moe_workspace_reserve(
            nulls.Maybe(runtime), nulls.Maybe(&limits), nulls.Maybe(ws));
      });
      return;
    case 1: {
      int64_t bytes = -1;
      const Outcome o =
          CheckOp("tailor_moe_workspace_bytes", call, runtime, nulls, [&] {
            return tailor_moe_workspace_bytes(nulls.Maybe(runtime),
                                              nulls.Maybe(&limits),
                                              nulls.Maybe(&bytes));
          });
      FUZZ_CHECK(!o.ok() || bytes == 0)  // 0 on host backends
          << "tailor_moe_workspace_bytes on the host: " << bytes;
      return;
    }
    case 2: {
      const int64_t bytes = in.OneIn(4) ? in.EdgeValue() : 4096;
      void* memory = in.OneIn(4) ? nullptr : call.Allocate(4096);
      CheckOp("tailor_moe_workspace_bind", call, runtime, nulls,
              [&] {
                return tailor_moe_workspace_bind(
                    nulls.Maybe(runtime), nulls.Maybe(&limits), memory, bytes,
                    nulls.Maybe(ws), nullptr);
              },
              {TAILOR_STATUS_INVALID_ARGUMENT, TAILOR_STATUS_UNIMPLEMENTED});
      return;
    }
    default:
      CheckOp("tailor_moe_workspace_take_errors", call, runtime, nulls, [&] {
        return tailor_moe_workspace_take_errors(nulls.Maybe(runtime),
                                                nulls.Maybe(ws), nullptr);
      });
  }
}

// ---- Paged decode -----------------------------------------------------------

// The attention layer one input works in; bounded: head_dim 64, GQA group
// 1 or 2, page size 5 or 16 (the CPU kernels' compiled-in values).
struct DecodeModel {
  int32_t dtype;
  int64_t kv_heads, group, page_size;
};

DecodeModel MakeDecodeModel(FuzzInput& in) {
  return {.dtype = in.Bool() ? TAILOR_DTYPE_BF16 : TAILOR_DTYPE_F16,
          .kv_heads = in.InRange(1, 2),
          .group = in.InRange(1, 2),
          .page_size = in.Bool() ? 16 : 5};
}

// What the last successful PlanDecode planned (per the harness).
struct PlannedDecode {
  bool planned = false;
  bool bounded = false;  // its kernels are in the bounded set
  int32_t dtype = 0;
  int64_t kv_heads = 0, qo_heads = 0, head_dim = 0, page_size = 0;
  std::vector<int32_t> seq_lens;
};

tailor_attention_decode_workspace_info DecodeInfo(
    const tailor_attention_decode_workspace* ws) {
  tailor_attention_decode_workspace_info info = {};
  const tailor_status s = tailor_attention_decode_workspace_get_info(ws, &info);
  FUZZ_CHECK(s == TAILOR_STATUS_OK) << tailor_last_error();
  return info;
}

void RunPlanDecode(CTensors& call, const DecodeModel& m,
                   tailor_attention_decode_workspace* ws,
                   PlannedDecode& planned) {
  FuzzInput& in = call.in();
  auto pick = [&](int64_t usual) {
    return in.OneIn(12) ? in.EdgeValue() : usual;
  };
  tailor_attention_decode_plan_args args = {};
  args.seq_lens = call.Index({in.InRange(0, 6)}, [](FuzzInput& f, int64_t) {
    return f.OneIn(32) ? f.Take<int32_t>()
                       : static_cast<int32_t>(f.InRange(0, 40));
  });
  args.page_size = pick(m.page_size);
  args.num_kv_heads = pick(m.kv_heads);
  args.num_qo_heads = pick(m.kv_heads * m.group);
  args.head_dim = pick(kHeadDim);
  args.dtype = in.OneIn(12) ? static_cast<int32_t>(in.InRange(-1, 9))
                            : (in.OneIn(8) ? 0 : m.dtype);  // 0: bf16
  tailor_runtime* runtime = Pick(call, false);  // plans compile nothing
  Nulls nulls(in);
  const Outcome plan =
      CheckOp("tailor_attention_decode_plan", call, runtime, nulls, [&] {
        return tailor_attention_decode_plan(
            nulls.Maybe(runtime), nulls.Maybe(&args), nulls.Maybe(ws));
      });
  if (nulls.any()) return;
  const tailor_attention_decode_workspace_info info = DecodeInfo(ws);
  FUZZ_CHECK(info.planned == plan.ok())
      << "after tailor_attention_decode_plan: " << plan.message;
  planned = {};
  if (!plan.ok()) return;
  FUZZ_CHECK(info.batch == args.seq_lens.dims[0]) << info.batch;
  planned.seq_lens.resize(info.batch);
  if (info.batch > 0) {  // an empty view's data may be null
    std::memcpy(planned.seq_lens.data(), args.seq_lens.data,
                info.batch * sizeof(int32_t));
  }
  planned.planned = true;
  planned.dtype = args.dtype == 0 ? TAILOR_DTYPE_BF16 : args.dtype;
  planned.kv_heads = args.num_kv_heads;
  planned.qo_heads = args.num_qo_heads;
  planned.head_dim = args.head_dim;
  planned.page_size = args.page_size;
  const int64_t group = args.num_qo_heads / args.num_kv_heads;
  planned.bounded = args.head_dim == kHeadDim && group <= 2 &&
                    (args.page_size == 5 || args.page_size == 16);
}

void RunRunDecode(CTensors& call, const DecodeModel& m,
                  tailor_attention_decode_workspace* ws,
                  const PlannedDecode& planned) {
  FuzzInput& in = call.in();
  // The plan's shape, or the model's when nothing is planned.
  const int32_t dtype = planned.planned ? planned.dtype : m.dtype;
  const int64_t kv = planned.planned ? planned.kv_heads : m.kv_heads;
  const int64_t hq = planned.planned ? planned.qo_heads : kv * m.group;
  const int64_t d = planned.planned ? planned.head_dim : kHeadDim;
  const int64_t page = planned.planned ? planned.page_size : m.page_size;
  const int64_t batch = static_cast<int64_t>(planned.seq_lens.size());
  int64_t longest = 0;
  for (int32_t len : planned.seq_lens)
    longest = std::max<int64_t>(longest, len);
  const int64_t rows = batch + in.InRange(0, 2);
  const int64_t max_pages = (longest + page - 1) / page + in.InRange(0, 1);
  const int64_t num_pages = in.InRange(1, 12);
  tailor_attention_decode_run_args args = {};
  args.q = call.Float({rows, hq, d}, dtype);
  // NHD (contiguous) or HND (memory [pages, Hkv, page_size, D]) caches.
  const std::vector<int64_t> cache = {num_pages, page, kv, d};
  std::vector<int64_t> cache_strides = {page * kv * d, kv * d, d, 1};
  if (in.OneIn(3)) cache_strides = {kv * page * d, d, page * d, 1};
  args.k_cache = call.Strided(cache, cache_strides, dtype);
  args.v_cache = call.Strided(cache, cache_strides, dtype);
  args.block_table = Entries(call, {rows, max_pages}, 0, num_pages - 1);
  args.seq_lens = call.Index({rows}, [&](FuzzInput& f, int64_t i) {
    if (i < batch && !f.OneIn(32)) return planned.seq_lens[i];
    return f.OneIn(4) ? f.Take<int32_t>()
                      : static_cast<int32_t>(f.InRange(0, 40));
  });
  args.out = call.Float({rows, hq, d}, dtype);
  call.Output(args.out);
  tailor_tensor lse;
  if (in.Bool()) {
    lse = call.Float({rows, hq}, TAILOR_DTYPE_F32);
    call.Output(lse);
    args.lse = &lse;
  }
  if (in.OneIn(4)) args.sm_scale = Scale(in, 0.125f);
  if (in.OneIn(4)) args.logits_soft_cap = Scale(in, 30.0f);
  const bool bounded = planned.bounded && !call.has_virtual_data();
  tailor_runtime* runtime = Pick(call, bounded);
  Nulls nulls(in);
  const Outcome run =
      CheckOp("tailor_attention_decode_run", call, runtime, nulls, [&] {
        return tailor_attention_decode_run(nulls.Maybe(runtime),
                                           nulls.Maybe(&args), nulls.Maybe(ws));
      });
  if (!run.ok()) return;
  // attention.h: rows of out and lse past the plan's batch are untouched.
  const size_t out_row = args.out.strides[0] * CDTypeSize(args.out.dtype);
  FUZZ_CHECK(call.OutputTailUnchanged(args.out, batch * out_row))
      << "RunDecode wrote out rows past the plan's batch " << batch;
  if (args.lse != nullptr) {
    FUZZ_CHECK(call.OutputTailUnchanged(lse, batch * lse.strides[0] * 4))
        << "RunDecode wrote lse rows past the plan's batch " << batch;
  }
}

// Reserve, Bytes, Bind and TakeErrors on the host runtimes.
void RunDecodeWorkspace(CTensors& call, const DecodeModel& m,
                        tailor_attention_decode_workspace* ws) {
  FuzzInput& in = call.in();
  auto pick = [&](int64_t usual) {
    return in.OneIn(8) ? in.EdgeValue() : usual;
  };
  tailor_attention_decode_limits limits = {
      .max_batch = pick(in.InRange(0, 8)),
      .num_qo_heads = pick(m.kv_heads * m.group),
      .num_kv_heads = pick(m.kv_heads),
      .head_dim = pick(kHeadDim),
      .page_size = pick(m.page_size),
      .dtype = in.OneIn(12) ? in.Take<int32_t>() : m.dtype};
  tailor_runtime* runtime = Pick(call, false);  // host buffers only
  Nulls nulls(in);
  switch (in.InRange(0, 3)) {
    case 0:
      CheckOp("tailor_attention_decode_workspace_reserve", call, runtime, nulls,
              [&] {
                return tailor_attention_decode_workspace_reserve(
                    nulls.Maybe(runtime), nulls.Maybe(&limits),
                    nulls.Maybe(ws));
              });
      return;
    case 1: {
      int64_t bytes = -1;
      const Outcome o = CheckOp(
          "tailor_attention_decode_workspace_bytes", call, runtime, nulls, [&] {
            return tailor_attention_decode_workspace_bytes(nulls.Maybe(runtime),
                                                           nulls.Maybe(&limits),
                                                           nulls.Maybe(&bytes));
          });
      FUZZ_CHECK(!o.ok() || bytes == 0)  // 0 on host backends
          << "tailor_attention_decode_workspace_bytes on the host: " << bytes;
      return;
    }
    case 2: {
      const int64_t bytes = in.OneIn(4) ? in.EdgeValue() : 4096;
      void* memory = in.OneIn(4) ? nullptr : call.Allocate(4096);
      CheckOp("tailor_attention_decode_workspace_bind", call, runtime, nulls,
              [&] {
                return tailor_attention_decode_workspace_bind(
                    nulls.Maybe(runtime), nulls.Maybe(&limits), memory, bytes,
                    nulls.Maybe(ws), nullptr);
              },
              {TAILOR_STATUS_INVALID_ARGUMENT, TAILOR_STATUS_UNIMPLEMENTED});
      return;
    }
    default:
      CheckOp("tailor_attention_decode_workspace_take_errors", call, runtime,
              nulls, [&] {
                return tailor_attention_decode_workspace_take_errors(
                    nulls.Maybe(runtime), nulls.Maybe(ws), nullptr);
              });
  }
}

// ---- Runtimes, stats and the small entries ----------------------------------

// tailor_runtime_create with fuzzed options. Options that would succeed
// stay cheap: no JIT, no disk cache, at most 2 threads, no stats endpoint.
void RunCreate(FuzzInput& in) {
  // No null or "": they reset the process's log level to
  // $TAILOR_LOG_LEVEL or info, and the run would log every compile.
  static const char* const kLogLevels[] = {"off", "verbose", "OFF", "off "};
  static const char* const kStatsAddrs[] = {
      nullptr, "", "nonsense", "127.0.0.1:99999", "256.0.0.1:1", "host:"};
  static const char* const kCacheDirs[] = {"/dev/null", "/proc/nonexistent",
                                           "/"};
  tailor_runtime_options options = {};
  options.backend =
      in.OneIn(4) ? in.Take<int32_t>() : static_cast<int32_t>(in.InRange(1, 3));
  options.device_index = in.OneIn(4) ? in.Take<int32_t>() : 0;
  options.disable_disk_cache = !in.OneIn(4);
  options.cache_dir =
      options.disable_disk_cache
          ? nullptr
          : kCacheDirs[in.InRange(0, std::size(kCacheDirs) - 1)];
  options.disable_jit = 1;
  options.memory_cache_capacity = in.OneIn(4) ? in.EdgeValue() : 0;
  options.compile_threads = in.OneIn(4) ? in.Take<int32_t>() : 1;
  options.cpu_threads = in.OneIn(4) ? in.Take<int32_t>() : 1;
  if (options.compile_threads > 2 && options.compile_threads <= 1024) return;
  if (options.cpu_threads > 2 && options.cpu_threads <= 4096) return;
  options.log_level = kLogLevels[in.InRange(0, std::size(kLogLevels) - 1)];
  options.stats_addr = kStatsAddrs[in.InRange(0, std::size(kStatsAddrs) - 1)];
  // A null `out` fails first. Null options (all defaults: every hardware
  // thread, the user's cache directory) are only passed along with it.
  const bool null_out = in.OneIn(16);
  tailor_runtime* runtime = reinterpret_cast<tailor_runtime*>(0x10);
  const tailor_status s =
      tailor_runtime_create(null_out && in.Bool() ? nullptr : &options,
                            null_out ? nullptr : &runtime);
  CheckStatus("tailor_runtime_create", s,
              {TAILOR_STATUS_OK, TAILOR_STATUS_INVALID_ARGUMENT,
               TAILOR_STATUS_UNAVAILABLE},
              null_out);
  if (null_out) return;
  if (s != TAILOR_STATUS_OK) {
    FUZZ_CHECK(runtime == nullptr) << "a failed create left *out set";
    return;
  }
  tailor_runtime_info info = {};
  FUZZ_CHECK(tailor_runtime_get_info(runtime, &info) == TAILOR_STATUS_OK)
      << tailor_last_error();
  FUZZ_CHECK(info.backend != TAILOR_BACKEND_AUTO && info.arch != nullptr &&
             info.cache_dir != nullptr && info.stats_address != nullptr);
  tailor_runtime_destroy(runtime);
}

void RunSmallEntries(FuzzInput& in, tailor_runtime* runtime) {
  const int code =
      in.OneIn(4) ? in.Take<int32_t>() : static_cast<int>(in.InRange(-1, 17));
  FUZZ_CHECK(tailor_status_name(code) != nullptr);
  FUZZ_CHECK(tailor_c_api_version() == TAILOR_C_API_VERSION);
  FUZZ_CHECK(tailor_version() != nullptr);
  // tailor_tensor_contiguous never fails, whatever rank and dims.
  int64_t dims[TAILOR_MAX_RANK];
  for (int64_t& d : dims) d = in.OneIn(4) ? in.EdgeValue() : in.InRange(0, 9);
  const int32_t rank =
      in.OneIn(4) ? in.Take<int32_t>() : static_cast<int32_t>(in.InRange(0, 6));
  const tailor_tensor t = tailor_tensor_contiguous(
      nullptr, in.Take<int32_t>(), rank, in.OneIn(8) ? nullptr : dims);
  FUZZ_CHECK(t.rank >= 0 && t.rank <= TAILOR_MAX_RANK) << t.rank;
  if (t.rank > 0) FUZZ_CHECK(t.strides[t.rank - 1] == 1);
  // Stats in a fuzzed format, maybe into a null out.
  Nulls nulls(in);
  char* text = nullptr;
  const int32_t format =
      in.OneIn(4) ? in.Take<int32_t>() : static_cast<int32_t>(in.InRange(0, 1));
  const tailor_status s =
      tailor_runtime_stats(nulls.Maybe(runtime), format, nulls.Maybe(&text));
  CheckStatus("tailor_runtime_stats", s,
              {TAILOR_STATUS_OK, TAILOR_STATUS_INVALID_ARGUMENT}, nulls.any());
  FUZZ_CHECK((s == TAILOR_STATUS_OK) == (text != nullptr && *text != '\0'));
  tailor_string_free(text);
  Nulls info_nulls(in);
  tailor_runtime_info info;
  CheckStatus("tailor_runtime_get_info",
              tailor_runtime_get_info(info_nulls.Maybe(runtime),
                                      info_nulls.Maybe(&info)),
              {TAILOR_STATUS_OK, TAILOR_STATUS_INVALID_ARGUMENT},
              info_nulls.any());
}

// Handles of one input, destroyed with it (workspaces before runtimes).
struct Handles {
  tailor_moe_workspace* moe = nullptr;
  tailor_attention_decode_workspace* decode = nullptr;
  Handles() {
    FUZZ_CHECK(tailor_moe_workspace_create(&moe) == TAILOR_STATUS_OK);
    FUZZ_CHECK(tailor_attention_decode_workspace_create(&decode) ==
               TAILOR_STATUS_OK);
  }
  ~Handles() {
    tailor_moe_workspace_destroy(moe);
    tailor_attention_decode_workspace_destroy(decode);
  }
};

}  // namespace
}  // namespace tailor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::fuzz;
  FuzzInput in(data, size);
  const MoeModel moe = MakeMoeModel(in);
  const DecodeModel decode = MakeDecodeModel(in);
  Handles handles;
  PlannedDecode planned;
  for (int step = in.InRange(1, 6); step > 0 && !in.empty(); --step) {
    CTensors call(in);
    switch (in.InRange(0, 11)) {
      case 0:
        RunRoute(call, moe, handles.moe);
        break;
      case 1:
        RunPack(call, moe, handles.moe);
        break;
      case 2:
        RunGroupedGemm(call, moe, handles.moe);
        break;
      case 3:
        RunCombine(call, moe, handles.moe);
        break;
      case 4:
        RunExperts(call, moe, handles.moe);
        break;
      case 5:
        RunMoeWorkspace(call, moe, handles.moe);
        break;
      case 6:
      case 7:
        RunPlanDecode(call, decode, handles.decode, planned);
        break;
      case 8:
        RunRunDecode(call, decode, handles.decode, planned);
        break;
      case 9:
        RunDecodeWorkspace(call, decode, handles.decode);
        break;
      case 10:
        RunSmallEntries(in, GetRuntimes().checks_only);
        break;
      default:
        if (in.OneIn(4)) RunCreate(in);
    }
    CheckGemmRecords(handles.moe);  // consumes no input
  }
  return 0;
}
