#include "ops/attention/ragged_checks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/tensor_checks.h"
#include "ops/attention/checks.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

using attention::RunRaggedArgs;

absl::Status Invalid(absl::string_view name, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", rule));
}

int64_t PagesOf(int64_t len, int64_t page_size) {
  return (len + page_size - 1) / page_size;
}

// The first KV position any query of sequence b attends (a sliding window
// leaves the pages before it unread, and they may hold anything).
int64_t FirstAttended(const plan::AttentionPlan& plan, int64_t b) {
  const plan::AttentionPlanParams& params = plan.params();
  if (!params.causal || params.window_left < 0) return 0;
  const int64_t first_pos = int64_t{plan.kv_lens()[b]} - plan.q_lens()[b];
  return std::max<int64_t>(0, first_pos - params.window_left);
}

absl::Status CheckRows(absl::string_view name, const TensorRef& t,
                       const RaggedShape& shape, int64_t total_q,
                       Device device) {
  TAILOR_RETURN_IF_ERROR(ExpectView(name, t, 3, shape.dtype, device));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 1, shape.num_qo_heads, "num_qo_heads of the plan"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 2, shape.head_dim, "head_dim of the plan"));
  if (t.dims[0] < total_q) {
    return Invalid(name, absl::StrCat("dims[0] must be >= the plan's query "
                                      "tokens (",
                                      total_q, "), got ", t.dims[0]));
  }
  return ExpectRowsOfVectors(name, t, device);
}

absl::Status CheckCache(absl::string_view name, const TensorRef& t,
                        const RaggedShape& shape, Device device) {
  TAILOR_RETURN_IF_ERROR(ExpectView(name, t, 4, shape.dtype, device));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 1, shape.page_size, "page_size of the plan"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 2, shape.num_kv_heads, "num_kv_heads of the plan"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 3, shape.head_dim, "head_dim of the plan"));
  if (t.dims[0] > std::numeric_limits<int32_t>::max()) {
    return Invalid(name,
                   absl::StrCat("dims[0] (num_pages) must be <= ",
                                std::numeric_limits<int32_t>::max(),
                                " (page ids are int32), got ", t.dims[0]));
  }
  return ExpectRowsOfVectors(name, t, device);
}

absl::Status CheckIndexVector(absl::string_view name, const TensorRef& t,
                              int64_t min_entries, absl::string_view what,
                              Device device) {
  TAILOR_RETURN_IF_ERROR(ExpectView(name, t, 1, DType::kI32, device));
  if (t.dims[0] < min_entries) {
    return Invalid(name, absl::StrCat("dims[0] must be >= ", what, " (",
                                      min_entries, "), got ", t.dims[0]));
  }
  if (!t.is_contiguous()) return Invalid(name, "must be contiguous");
  return absl::OkStatus();
}

absl::Status CheckPages(const RunRaggedArgs& args, const RaggedShape& shape,
                        const plan::AttentionPlan& plan, Device device) {
  const int64_t batch = plan.batch();
  const TensorRef& table = args.block_table;
  if (args.page_indptr.has_value()) {
    TAILOR_RETURN_IF_ERROR(CheckIndexVector("page_indptr", *args.page_indptr,
                                            batch + 1, "the plan's batch + 1",
                                            device));
    return CheckIndexVector("block_table", table, 0, "0", device);
  }
  TAILOR_RETURN_IF_ERROR(
      ExpectView("block_table", table, 2, DType::kI32, device));
  if (table.dims[0] < batch) {
    return Invalid("block_table",
                   absl::StrCat("dims[0] must be >= the plan's batch (", batch,
                                "), got ", table.dims[0]));
  }
  if (table.strides[1] != 1 && table.dims[1] > 1) {
    return Invalid("block_table",
                   absl::StrCat("the last dim must be contiguous (stride 1), "
                                "got stride ",
                                table.strides[1]));
  }
  int64_t longest = 0;
  for (int32_t len : plan.kv_lens()) longest = std::max<int64_t>(longest, len);
  const int64_t pages = PagesOf(longest, shape.page_size);
  if (table.dims[1] < pages) {
    return Invalid("block_table",
                   absl::StrCat("dims[1] (max_pages) must be >= ", pages,
                                " (the plan's longest sequence, ", longest,
                                " tokens, in pages of ", shape.page_size,
                                "), got ", table.dims[1]));
  }
  return absl::OkStatus();
}

absl::Status CheckScales(const RunRaggedArgs& args) {
  if (args.sm_scale.has_value() &&
      !(std::isfinite(*args.sm_scale) && *args.sm_scale > 0)) {
    return Invalid("sm_scale", absl::StrCat("must be finite and > 0, got ",
                                            *args.sm_scale));
  }
  if (!(std::isfinite(args.logits_soft_cap) && args.logits_soft_cap >= 0)) {
    return Invalid("logits_soft_cap",
                   absl::StrCat("must be finite and >= 0 (0: no cap), got ",
                                args.logits_soft_cap));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputs(const RunRaggedArgs& args, const RaggedShape& shape,
                          int64_t total_q, Device device) {
  TAILOR_RETURN_IF_ERROR(CheckRows("out", args.out, shape, total_q, device));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims("out", args.out, 0, args.q.dims[0], "q.dims[0]"));
  if (args.lse.has_value()) {
    const TensorRef& lse = *args.lse;
    TAILOR_RETURN_IF_ERROR(ExpectView("lse", lse, 2, DType::kF32, device));
    TAILOR_RETURN_IF_ERROR(
        ExpectDims("lse", lse, 0, args.q.dims[0], "q.dims[0]"));
    TAILOR_RETURN_IF_ERROR(ExpectDims("lse", lse, 1, shape.num_qo_heads,
                                      "num_qo_heads of the plan"));
    if (!lse.is_contiguous()) return Invalid("lse", "must be contiguous");
    TAILOR_RETURN_IF_ERROR(ExpectApart("lse", lse, "out", args.out));
    TAILOR_RETURN_IF_ERROR(ExpectApart("lse", lse, "q", args.q));
  }
  TAILOR_RETURN_IF_ERROR(ExpectApart("out", args.out, "q", args.q));
  TAILOR_RETURN_IF_ERROR(ExpectApart("out", args.out, "k_cache", args.k_cache));
  return ExpectApart("out", args.out, "v_cache", args.v_cache);
}

}  // namespace

absl::StatusOr<RaggedShape> CheckRaggedShape(const RaggedShapeFields& f,
                                             absl::string_view prefix) {
  TAILOR_ASSIGN_OR_RETURN(DecodeShape decode,
                          CheckDecodeShape({.num_qo_heads = f.num_qo_heads,
                                            .num_kv_heads = f.num_kv_heads,
                                            .head_dim = f.head_dim,
                                            .page_size = f.page_size,
                                            .dtype = f.dtype},
                                           prefix));
  if (f.window_left < -1 || f.window_left >= plan::kMaxAttentionLen) {
    return Invalid(
        absl::StrCat(prefix, "window_left"),
        absl::StrCat("must be -1 (none) or in [0, ", plan::kMaxAttentionLen,
                     "), got ", f.window_left));
  }
  if (f.window_left >= 0 && !f.causal) {
    return Invalid(absl::StrCat(prefix, "window_left"),
                   "a sliding window needs causal = true");
  }
  return RaggedShape{.dtype = decode.dtype,
                     .head_dim = decode.head_dim,
                     .num_qo_heads = f.num_qo_heads,
                     .num_kv_heads = f.num_kv_heads,
                     .page_size = decode.page_size,
                     .causal = f.causal,
                     .window_left = f.window_left};
}

absl::Status CheckHostVector(absl::string_view name, const TensorRef& t,
                             absl::string_view op) {
  TAILOR_RETURN_IF_ERROR(ExpectTensor(name, t, 1, DType::kI32));
  if (t.device.type != DeviceType::kCpu) {
    return Invalid(name, absl::StrCat("must be in host memory (", op,
                                      " reads it on the host), got ",
                                      DeviceName(t.device)));
  }
  if (!t.is_contiguous()) return Invalid(name, "must be contiguous");
  return absl::OkStatus();
}

absl::Status QueryLengthsOf(absl::string_view name, const TensorRef& q_indptr,
                            std::vector<int32_t>& q_lens) {
  const int64_t entries = q_indptr.dims[0];
  if (entries < 1 || entries - 1 > attention::kMaxBatch) {
    return Invalid(name,
                   absl::StrCat("dims[0] (B + 1) must be in [1, ",
                                attention::kMaxBatch + 1, "], got ", entries));
  }
  const int32_t* indptr = q_indptr.as<int32_t>();
  if (indptr[0] != 0) {
    return Invalid(absl::StrCat(name, "[0]"),
                   absl::StrCat("must be 0, got ", indptr[0]));
  }
  q_lens.clear();
  for (int64_t b = 1; b < entries; ++b) {
    if (indptr[b] < indptr[b - 1]) {
      return Invalid(absl::StrCat(name, "[", b, "]"),
                     absl::StrCat(indptr[b], " is less than ", name, "[", b - 1,
                                  "] = ", indptr[b - 1]));
    }
    q_lens.push_back(indptr[b] - indptr[b - 1]);
  }
  if (indptr[entries - 1] > plan::kMaxAttentionLen) {
    return Invalid(name,
                   absl::StrCat(indptr[entries - 1], " query tokens exceed ",
                                plan::kMaxAttentionLen));
  }
  return absl::OkStatus();
}

absl::Status KvLengthsFromPages(const TensorRef& kv_indptr,
                                const TensorRef& kv_last_page_len,
                                int64_t page_size, int64_t batch,
                                std::vector<int32_t>& kv_lens) {
  TAILOR_RETURN_IF_ERROR(
      ExpectDims("kv_indptr", kv_indptr, 0, batch + 1, "qo_indptr.dims[0]"));
  TAILOR_RETURN_IF_ERROR(ExpectDims("kv_last_page_len", kv_last_page_len, 0,
                                    batch,
                                    "the batch (qo_indptr.dims[0] - 1)"));
  const int32_t* indptr = kv_indptr.as<int32_t>();
  const int32_t* last = kv_last_page_len.as<int32_t>();
  if (indptr[0] != 0) {
    return Invalid("kv_indptr[0]", absl::StrCat("must be 0, got ", indptr[0]));
  }
  kv_lens.clear();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = int64_t{indptr[b + 1]} - indptr[b];
    if (pages < 0) {
      return Invalid(absl::StrCat("kv_indptr[", b + 1, "]"),
                     absl::StrCat(indptr[b + 1], " is less than kv_indptr[", b,
                                  "] = ", indptr[b]));
    }
    if (pages > 0 && (last[b] < 1 || last[b] > page_size)) {
      return Invalid(
          absl::StrCat("kv_last_page_len[", b, "]"),
          absl::StrCat("must be in [1, page_size = ", page_size,
                       "] for a sequence with pages, got ", last[b]));
    }
    const int64_t len = pages == 0 ? 0 : (pages - 1) * page_size + last[b];
    if (len > plan::kMaxAttentionLen) {
      return Invalid(
          absl::StrCat("kv_indptr[", b + 1, "]"),
          absl::StrCat("sequence ", b, " holds ", len, " tokens, more than ",
                       plan::kMaxAttentionLen));
    }
    kv_lens.push_back(static_cast<int32_t>(len));
  }
  return absl::OkStatus();
}

absl::Status CheckRunRaggedArgs(const RunRaggedArgs& args,
                                const RaggedShape& shape,
                                const plan::AttentionPlan& plan,
                                Device device) {
  const int64_t total_q = plan.total_q();
  TAILOR_RETURN_IF_ERROR(CheckRows("q", args.q, shape, total_q, device));
  TAILOR_RETURN_IF_ERROR(CheckCache("k_cache", args.k_cache, shape, device));
  TAILOR_RETURN_IF_ERROR(CheckCache("v_cache", args.v_cache, shape, device));
  TAILOR_RETURN_IF_ERROR(ExpectDims("v_cache", args.v_cache, 0,
                                    args.k_cache.dims[0],
                                    "k_cache.dims[0] (num_pages)"));
  TAILOR_RETURN_IF_ERROR(CheckPages(args, shape, plan, device));
  if (args.kv_lens.has_value()) {
    TAILOR_RETURN_IF_ERROR(CheckIndexVector(
        "kv_lens", *args.kv_lens, plan.batch(), "the plan's batch", device));
  }
  TAILOR_RETURN_IF_ERROR(CheckOutputs(args, shape, total_q, device));
  return CheckScales(args);
}

std::string BadKvLenText(int64_t seq, int32_t device_len, int64_t planned) {
  return absl::StrCat("kv_lens[", seq, "]: ", device_len, " differs from ",
                      planned, ", the length PlanRagged planned");
}

absl::Status CheckRunRaggedContents(const RunRaggedArgs& args,
                                    const plan::AttentionPlan& plan,
                                    int64_t page_size) {
  const int32_t* table = args.block_table.as<int32_t>();
  const int32_t* indptr =
      args.page_indptr.has_value() ? args.page_indptr->as<int32_t>() : nullptr;
  const int64_t num_pages = args.k_cache.dims[0];
  for (int64_t b = 0; b < plan.batch(); ++b) {
    const int32_t planned = plan.kv_lens()[b];
    if (args.kv_lens.has_value()) {
      const int32_t got = args.kv_lens->as<int32_t>()[b];
      if (got != planned) {
        return absl::InvalidArgumentError(BadKvLenText(b, got, planned));
      }
    }
    const int64_t pages = PagesOf(planned, page_size);
    int64_t row = b * args.block_table.strides[0];
    if (indptr != nullptr) {
      const int64_t have = int64_t{indptr[b + 1]} - indptr[b];
      if (indptr[b] < 0 || have < pages ||
          indptr[b] + pages > args.block_table.dims[0]) {
        return Invalid(
            absl::StrCat("page_indptr[", b, "]"),
            absl::StrCat("sequence ", b, " needs ", pages, " pages from entry ",
                         indptr[b], ", has ", have, " of block_table's ",
                         args.block_table.dims[0]));
      }
      row = indptr[b];
    }
    for (int64_t j = FirstAttended(plan, b) / page_size; j < pages; ++j) {
      const int32_t page = table[row + j];
      if (page < 0 || page >= num_pages) {
        return absl::InvalidArgumentError(BadPageText(b, j, page, num_pages));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tailor::internal
