// Fuzzes the C ABI's ragged-attention entries (tailor_attention_ragged_*):
// each input is a sequence of plans (vLLM's or FlashInfer's metadata), runs
// (a block table, or kv_indices with page_indptr) and workspace calls on one
// ragged workspace, with the arguments a C caller can get wrong: null
// handles, args and out-pointers, dtype and mask values out of their enums,
// a window without its mask, broken indptrs and lengths, page ids out of
// range, edge-value dims and strides, misaligned data, NaN or negative
// scales (c_tensors.h).
//
// What must hold, beyond CheckOp's promises for every entry (c_api_checks.h):
//   - a failed plan leaves the workspace not planned; a successful one
//     reports the batch and query tokens it was given (get_info);
//   - a run leaves rows of out and lse past the plan's query tokens
//     untouched;
//   - nothing reads or writes outside the tensors it is given (guarded
//     memory; ASan and UBSan in `make fuzz`).
// Calls whose kernels lie in a small table (head_dim 64, group 1 or 2, page
// size 5 or 16) run on the JIT runtime; the others only check.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "c_api_checks.h"
#include "c_tensors.h"
#include "fuzz_input.h"
#include "tailor/c_api.h"

namespace tailor::fuzz {
namespace {

constexpr int64_t kHeadDim = 64;

// The attention layer one input works in (bounded as above).
struct RaggedModel {
  int32_t dtype;
  int64_t kv_heads, group, page_size;
  int32_t mask;
};

RaggedModel MakeRaggedModel(FuzzInput& in) {
  return {.dtype = in.Bool() ? TAILOR_DTYPE_BF16 : TAILOR_DTYPE_F16,
          .kv_heads = in.InRange(1, 2),
          .group = in.InRange(1, 2),
          .page_size = in.Bool() ? 16 : 5,
          .mask = static_cast<int32_t>(in.InRange(0, 2))};
}

// What the last successful plan planned (per the harness).
struct PlannedRagged {
  bool planned = false;
  // The harness knows the plan's lengths: no broken metadata reached it
  // (a broken entry can still make a valid plan of other lengths).
  bool known = false;
  bool bounded = false;  // its kernels are in the bounded table
  int32_t dtype = 0;
  int64_t kv_heads = 0, qo_heads = 0, head_dim = 0, page_size = 0;
  std::vector<int32_t> q_lens, kv_lens;
  int64_t total_q() const {
    int64_t n = 0;
    for (int32_t q : q_lens) n += q;
    return n;
  }
};

tailor_attention_ragged_workspace_info Info(
    const tailor_attention_ragged_workspace* ws) {
  tailor_attention_ragged_workspace_info info = {};
  FUZZ_CHECK(tailor_attention_ragged_workspace_get_info(ws, &info) ==
             TAILOR_STATUS_OK)
      << tailor_last_error();
  return info;
}

// A [n] index tensor holding `values` (now and then one broken entry; any
// values past them when its dims were broken).
tailor_tensor Values(CTensors& call, const std::vector<int32_t>& values) {
  return call.Index(
      {static_cast<int64_t>(values.size())}, [values](FuzzInput& f, int64_t i) {
        const bool ours = i < static_cast<int64_t>(values.size());
        return !ours || f.OneIn(48) ? f.Take<int32_t>() : values[i];
      });
}

std::vector<int32_t> Indptr(const std::vector<int32_t>& counts) {
  std::vector<int32_t> indptr = {0};
  for (int32_t n : counts) indptr.push_back(indptr.back() + n);
  return indptr;
}

int32_t PagesOf(int32_t kv_len, int64_t page_size) {
  return static_cast<int32_t>((kv_len + page_size - 1) / page_size);
}

// The layer fields of a plan's arguments: the model's, now and then broken.
template <typename Args>
void FillLayer(FuzzInput& in, const RaggedModel& m, Args& args) {
  auto pick = [&](int64_t usual) {
    return in.OneIn(12) ? in.EdgeValue() : usual;
  };
  args.page_size = pick(m.page_size);
  args.num_kv_heads = pick(m.kv_heads);
  args.num_qo_heads = pick(m.kv_heads * m.group);
  args.head_dim = pick(kHeadDim);
  args.dtype = in.OneIn(12) ? static_cast<int32_t>(in.InRange(-1, 9))
                            : (in.OneIn(8) ? 0 : m.dtype);  // 0: bf16
  args.mask = in.OneIn(12) ? static_cast<int32_t>(in.InRange(-1, 4)) : m.mask;
  args.window_left = args.mask == TAILOR_ATTENTION_MASK_WINDOW
                         ? (in.OneIn(12) ? in.EdgeValue() : in.InRange(0, 9))
                         : (in.OneIn(16) ? in.EdgeValue() : 0);
}

// Plans with vLLM's metadata (q_indptr, kv_lens) or FlashInfer's
// (qo_indptr, kv_indptr, kv_last_page_len).
void RunPlan(CTensors& call, const RaggedModel& m,
             tailor_attention_ragged_workspace* ws, PlannedRagged& planned) {
  FuzzInput& in = call.in();
  const int64_t batch = in.InRange(0, 5);
  std::vector<int32_t> q_lens(batch), kv_lens(batch);
  for (int64_t b = 0; b < batch; ++b) {
    q_lens[b] = static_cast<int32_t>(in.InRange(0, 40));
    kv_lens[b] = q_lens[b] + static_cast<int32_t>(in.InRange(0, 40));
    if (m.mask == TAILOR_ATTENTION_MASK_NONE && in.OneIn(4)) {
      kv_lens[b] = static_cast<int32_t>(in.InRange(0, 40));
    }
  }
  const bool flashinfer = in.Bool();
  tailor_runtime* runtime = Pick(call, false);  // plans compile nothing
  Nulls nulls(in);
  Outcome plan;
  int64_t page_size = 0, kv_heads = 0, qo_heads = 0, head_dim = 0;
  int64_t indptr_size = 0;  // dims[0] of the q indptr as given (maybe broken)
  int32_t dtype = 0;
  if (!flashinfer) {
    tailor_attention_ragged_plan_args args = {};
    args.q_indptr = Values(call, Indptr(q_lens));
    args.kv_lens = Values(call, kv_lens);
    FillLayer(in, m, args);
    plan = CheckOp("tailor_attention_ragged_plan", call, runtime, nulls, [&] {
      return tailor_attention_ragged_plan(nulls.Maybe(runtime),
                                          nulls.Maybe(&args), nulls.Maybe(ws));
    });
    page_size = args.page_size, kv_heads = args.num_kv_heads;
    qo_heads = args.num_qo_heads, head_dim = args.head_dim, dtype = args.dtype;
    indptr_size = args.q_indptr.dims[0];
  } else {
    tailor_attention_ragged_plan_flashinfer_args args = {};
    FillLayer(in, m, args);
    std::vector<int32_t> pages(batch), last(batch);
    for (int64_t b = 0; b < batch; ++b) {
      pages[b] = PagesOf(kv_lens[b], m.page_size);
      last[b] =
          pages[b] == 0
              ? 0
              : kv_lens[b] - (pages[b] - 1) * static_cast<int32_t>(m.page_size);
      // The plan derives the lengths with its own page size.
      kv_lens[b] =
          pages[b] == 0
              ? 0
              : static_cast<int32_t>((pages[b] - 1) * args.page_size + last[b]);
    }
    args.qo_indptr = Values(call, Indptr(q_lens));
    args.kv_indptr = Values(call, Indptr(pages));
    args.kv_last_page_len = Values(call, last);
    plan = CheckOp(
        "tailor_attention_ragged_plan_flashinfer", call, runtime, nulls, [&] {
          return tailor_attention_ragged_plan_flashinfer(
              nulls.Maybe(runtime), nulls.Maybe(&args), nulls.Maybe(ws));
        });
    page_size = args.page_size, kv_heads = args.num_kv_heads;
    qo_heads = args.num_qo_heads, head_dim = args.head_dim, dtype = args.dtype;
    indptr_size = args.qo_indptr.dims[0];
  }
  if (nulls.any()) return;
  const tailor_attention_ragged_workspace_info info = Info(ws);
  FUZZ_CHECK(info.planned == plan.ok()) << "after a plan: " << plan.message;
  planned = {};
  if (!plan.ok()) return;
  FUZZ_CHECK(info.batch == indptr_size - 1)
      << info.batch << " planned from an indptr of " << indptr_size;
  planned = {.planned = true,
             .dtype = dtype == 0 ? TAILOR_DTYPE_BF16 : dtype,
             .kv_heads = kv_heads,
             .qo_heads = qo_heads,
             .head_dim = head_dim,
             .page_size = page_size,
             .q_lens = q_lens,
             .kv_lens = kv_lens};
  planned.known = info.batch == batch && info.total_q == planned.total_q();
  planned.bounded = planned.known && head_dim == kHeadDim &&
                    qo_heads / kv_heads <= 2 &&
                    (page_size == 5 || page_size == 16);
}

// Runs the last plan (or the model's shape when there is none) over fuzzed
// tensors, in either page form.
void RunRun(CTensors& call, const RaggedModel& m,
            tailor_attention_ragged_workspace* ws,
            const PlannedRagged& planned) {
  FuzzInput& in = call.in();
  if (planned.planned && !planned.known) return;  // lengths unknown here
  const bool p = planned.planned;
  const int32_t dtype = p ? planned.dtype : m.dtype;
  const int64_t kv = p ? planned.kv_heads : m.kv_heads;
  const int64_t hq = p ? planned.qo_heads : kv * m.group;
  const int64_t d = p ? planned.head_dim : kHeadDim;
  const int64_t page = p ? planned.page_size : m.page_size;
  const int64_t batch = p ? static_cast<int64_t>(planned.q_lens.size()) : 1;
  const int64_t total = p ? planned.total_q() : 1;
  if (kv <= 0 || page <= 0 || hq <= 0 || d <= 0 || hq > 1024 || d > 256 ||
      page > 256 || kv > 1024) {
    return;  // a plan of edge values that planned: nothing sane to run
  }
  std::vector<int32_t> pages(batch, 1);
  int64_t max_pages = 1;
  for (int64_t b = 0; p && b < batch; ++b) {
    pages[b] = PagesOf(planned.kv_lens[b], page);
    max_pages = std::max<int64_t>(max_pages, pages[b]);
  }
  const int64_t rows = total + in.InRange(0, 2);
  const int64_t num_pages = in.InRange(1, 12);
  tailor_attention_ragged_run_args args = {};
  args.q = call.Float({rows, hq, d}, dtype);
  std::vector<int64_t> strides = {page * kv * d, kv * d, d, 1};
  if (in.OneIn(3)) strides = {kv * page * d, d, page * d, 1};  // HND
  args.k_cache = call.Strided({num_pages, page, kv, d}, strides, dtype);
  args.v_cache = call.Strided({num_pages, page, kv, d}, strides, dtype);
  tailor_tensor page_indptr, kv_lens, lse;
  if (in.Bool()) {
    args.block_table =
        Entries(call, {batch + in.InRange(0, 1), max_pages}, 0, num_pages - 1);
  } else {
    const std::vector<int32_t> indptr = Indptr(pages);
    args.block_table = Entries(call, {indptr.back()}, 0, num_pages - 1);
    page_indptr = Values(call, indptr);
    args.page_indptr = &page_indptr;
  }
  if (p && in.Bool()) {
    kv_lens = Values(call, planned.kv_lens);
    args.kv_lens = &kv_lens;
  }
  args.out = call.Float({rows, hq, d}, dtype);
  call.Output(args.out);
  if (in.Bool()) {
    lse = call.Float({rows, hq}, TAILOR_DTYPE_F32);
    call.Output(lse);
    args.lse = &lse;
  }
  if (in.OneIn(4)) args.sm_scale = Scale(in, 0.125f);
  if (in.OneIn(4)) args.logits_soft_cap = Scale(in, 30.0f);
  tailor_runtime* runtime = Pick(call, planned.bounded);
  Nulls nulls(in);
  const Outcome run =
      CheckOp("tailor_attention_ragged_run", call, runtime, nulls, [&] {
        return tailor_attention_ragged_run(nulls.Maybe(runtime),
                                           nulls.Maybe(&args), nulls.Maybe(ws));
      });
  if (!run.ok()) return;
  FUZZ_CHECK(p) << "a run succeeded without a plan";
  // Rows past the plan's are untouched; checked where each row of out lies
  // below the next (the op accepts views whose rows overlap).
  const tailor_tensor& o = args.out;
  if ((o.dims[1] - 1) * o.strides[1] + o.dims[2] <= o.strides[0]) {
    const size_t out_row = o.strides[0] * CDTypeSize(o.dtype);
    FUZZ_CHECK(call.OutputTailUnchanged(o, total * out_row))
        << "RunRagged wrote out rows past the plan's " << total << " tokens";
  }
  if (args.lse != nullptr) {
    FUZZ_CHECK(call.OutputTailUnchanged(lse, total * lse.strides[0] * 4))
        << "RunRagged wrote lse rows past the plan's " << total << " tokens";
  }
}

// Reserve, Bytes, Bind and TakeErrors on the host runtimes.
void RunWorkspace(CTensors& call, const RaggedModel& m,
                  tailor_attention_ragged_workspace* ws) {
  FuzzInput& in = call.in();
  auto pick = [&](int64_t usual) {
    return in.OneIn(8) ? in.EdgeValue() : usual;
  };
  tailor_attention_ragged_limits limits = {
      .max_batch = pick(in.InRange(0, 8)),
      .max_tokens = pick(in.InRange(0, 64)),
      .num_qo_heads = pick(m.kv_heads * m.group),
      .num_kv_heads = pick(m.kv_heads),
      .head_dim = pick(kHeadDim),
      .page_size = pick(m.page_size),
      .dtype = in.OneIn(12) ? in.Take<int32_t>() : m.dtype,
      .mask = in.OneIn(12) ? in.Take<int32_t>() : m.mask,
      .window_left = m.mask == TAILOR_ATTENTION_MASK_WINDOW ? 3 : 0};
  tailor_runtime* runtime = Pick(call, false);  // host buffers only
  Nulls nulls(in);
  switch (in.InRange(0, 3)) {
    case 0:
      CheckOp("tailor_attention_ragged_workspace_reserve", call, runtime, nulls,
              [&] {
                return tailor_attention_ragged_workspace_reserve(
                    nulls.Maybe(runtime), nulls.Maybe(&limits),
                    nulls.Maybe(ws));
              });
      return;
    case 1: {
      int64_t bytes = -1;
      const Outcome o = CheckOp(
          "tailor_attention_ragged_workspace_bytes", call, runtime, nulls, [&] {
            return tailor_attention_ragged_workspace_bytes(nulls.Maybe(runtime),
                                                           nulls.Maybe(&limits),
                                                           nulls.Maybe(&bytes));
          });
      FUZZ_CHECK(!o.ok() || bytes == 0)  // 0 on host backends
          << "tailor_attention_ragged_workspace_bytes on the host: " << bytes;
      return;
    }
    case 2: {
      const int64_t bytes = in.OneIn(4) ? in.EdgeValue() : 4096;
      void* memory = in.OneIn(4) ? nullptr : call.Allocate(4096);
      CheckOp("tailor_attention_ragged_workspace_bind", call, runtime, nulls,
              [&] {
                return tailor_attention_ragged_workspace_bind(
                    nulls.Maybe(runtime), nulls.Maybe(&limits), memory, bytes,
                    nulls.Maybe(ws), nullptr);
              },
              {TAILOR_STATUS_INVALID_ARGUMENT, TAILOR_STATUS_UNIMPLEMENTED});
      return;
    }
    default:
      CheckOp("tailor_attention_ragged_workspace_take_errors", call, runtime,
              nulls, [&] {
                return tailor_attention_ragged_workspace_take_errors(
                    nulls.Maybe(runtime), nulls.Maybe(ws), nullptr);
              });
  }
}

struct Workspace {
  tailor_attention_ragged_workspace* ws = nullptr;
  Workspace() {
    FUZZ_CHECK(tailor_attention_ragged_workspace_create(&ws) ==
               TAILOR_STATUS_OK)
        << tailor_last_error();
  }
  ~Workspace() { tailor_attention_ragged_workspace_destroy(ws); }
};

}  // namespace
}  // namespace tailor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::fuzz;
  FuzzInput in(data, size);
  const RaggedModel model = MakeRaggedModel(in);
  Workspace workspace;
  PlannedRagged planned;
  for (int step = in.InRange(1, 6); step > 0 && !in.empty(); --step) {
    CTensors call(in);
    switch (in.InRange(0, 3)) {
      case 0:
        RunPlan(call, model, workspace.ws, planned);
        break;
      case 1:
      case 2:
        RunRun(call, model, workspace.ws, planned);
        break;
      default:
        RunWorkspace(call, model, workspace.ws);
    }
  }
  return 0;
}
