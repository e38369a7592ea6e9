#include "ops/attention/checks.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor_checks.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

using attention::RunDecodeArgs;

constexpr int64_t kVectorElements = 8;  // 16 bytes of bf16 / f16
constexpr uintptr_t kVectorBytes = 16;

absl::Status Invalid(absl::string_view name, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", rule));
}

}  // namespace

absl::Status ExpectDims(absl::string_view name, const TensorRef& t, int dim,
                        int64_t expected, absl::string_view what) {
  if (t.dims[dim] != expected) {
    return Invalid(name, absl::StrCat("dims[", dim, "] must equal ", what, " (",
                                      expected, "), got ", t.dims[dim]));
  }
  return absl::OkStatus();
}

// ExpectTensor, on `device`, and an element count that fits int64.
absl::Status ExpectView(absl::string_view name, const TensorRef& t, int rank,
                        DType dtype, Device device) {
  TAILOR_RETURN_IF_ERROR(ExpectTensor(name, t, rank, dtype));
  int64_t elements = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (__builtin_mul_overflow(elements, t.dims[i], &elements)) {
      return Invalid(name, absl::StrCat("element count of ", t.ShapeString(),
                                        " overflows int64"));
    }
  }
  // Where the view reaches, sum((dims[i] - 1) * strides[i]) elements, in
  // bytes: it fits int64, so the overlap checks below and the kernels'
  // address arithmetic cannot overflow (no real buffer is that large).
  if (elements > 0) {
    int64_t last = 0, step = 0, bytes = 0;
    bool overflows = false;
    for (int i = 0; i < t.rank && !overflows; ++i) {
      overflows = __builtin_mul_overflow(t.dims[i] - 1, t.strides[i], &step) ||
                  __builtin_add_overflow(last, step, &last);
    }
    overflows = overflows || __builtin_add_overflow(last, 1, &last) ||
                __builtin_mul_overflow(
                    last, static_cast<int64_t>(DTypeSize(t.dtype)), &bytes);
    if (overflows) {
      return Invalid(
          name, absl::StrCat("its strides reach past 2^63 bytes (",
                             t.ShapeString(), ", strides ",
                             absl::StrJoin(t.strides, t.strides + t.rank, ", "),
                             ")"));
    }
  }
  if (!(t.device == device)) {
    return Invalid(name, absl::StrCat("must be on ", DeviceName(device),
                                      " (the runtime's device), got ",
                                      DeviceName(t.device)));
  }
  return absl::OkStatus();
}

// The last dim is contiguous; on a GPU, data is 16-byte aligned and the
// other strides are multiples of 8 elements (16 bytes).
absl::Status ExpectRowsOfVectors(absl::string_view name, const TensorRef& t,
                                 Device device) {
  if (t.strides[t.rank - 1] != 1 && t.dims[t.rank - 1] > 1) {
    return Invalid(name, absl::StrCat("the last dim must be contiguous "
                                      "(stride 1), got stride ",
                                      t.strides[t.rank - 1]));
  }
  if (device.type == DeviceType::kCpu) return absl::OkStatus();
  if (reinterpret_cast<uintptr_t>(t.data) % kVectorBytes != 0) {
    return Invalid(name, absl::StrCat("data must be 16-byte aligned on ",
                                      DeviceName(device)));
  }
  for (int i = 0; i + 1 < t.rank; ++i) {
    if (t.strides[i] % kVectorElements != 0) {
      return Invalid(name, absl::StrCat("strides[", i,
                                        "] must be a multiple of 8 elements "
                                        "(16 bytes) on a GPU, got ",
                                        t.strides[i]));
    }
  }
  return absl::OkStatus();
}

namespace {

// [first byte, one past the last byte] a view can touch.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
};
ByteRange RangeOf(const TensorRef& t) {
  ByteRange r;
  if (t.empty()) return r;
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) last += (t.dims[i] - 1) * t.strides[i];
  r.begin = reinterpret_cast<uintptr_t>(t.data);
  r.end = r.begin + static_cast<uintptr_t>(last + 1) * DTypeSize(t.dtype);
  return r;
}

}  // namespace

absl::Status ExpectApart(absl::string_view name, const TensorRef& t,
                         absl::string_view other_name, const TensorRef& other) {
  const ByteRange a = RangeOf(t), b = RangeOf(other);
  if (a.begin < a.end && b.begin < b.end && a.begin < b.end &&
      b.begin < a.end) {
    return Invalid(name,
                   absl::StrCat("must not overlap ", other_name, " in memory"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckQueryLike(absl::string_view name, const TensorRef& t,
                            const DecodeShape& shape, int64_t num_qo_heads,
                            int64_t batch, Device device) {
  TAILOR_RETURN_IF_ERROR(ExpectView(name, t, 3, shape.dtype, device));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 1, num_qo_heads, "num_qo_heads of the plan"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims(name, t, 2, shape.head_dim, "head_dim of the plan"));
  if (t.dims[0] < batch) {
    return Invalid(name, absl::StrCat("dims[0] must be >= the plan's batch (",
                                      batch, "), got ", t.dims[0]));
  }
  return ExpectRowsOfVectors(name, t, device);
}

absl::Status CheckCache(absl::string_view name, const TensorRef& t,
                        const DecodeShape& shape, Device device) {
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

absl::Status CheckIndexTensors(const RunDecodeArgs& args, int64_t rows,
                               const DecodeShape& shape,
                               const plan::DecodePlan& plan, Device device) {
  const TensorRef& table = args.block_table;
  TAILOR_RETURN_IF_ERROR(
      ExpectView("block_table", table, 2, DType::kI32, device));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims("block_table", table, 0, rows, "q.dims[0]"));
  if (table.strides[1] != 1 && table.dims[1] > 1) {
    return Invalid("block_table", absl::StrCat("the last dim must be "
                                               "contiguous (stride 1), got "
                                               "stride ",
                                               table.strides[1]));
  }
  const int64_t pages_needed =
      (plan.max_seq_len() + shape.page_size - 1) / shape.page_size;
  if (table.dims[1] < pages_needed) {
    return Invalid("block_table",
                   absl::StrCat("dims[1] (max_pages) must be >= ", pages_needed,
                                " (the plan's longest sequence, ",
                                plan.max_seq_len(), " tokens, in pages of ",
                                shape.page_size, "), got ", table.dims[1]));
  }
  TAILOR_RETURN_IF_ERROR(
      ExpectView("seq_lens", args.seq_lens, 1, DType::kI32, device));
  TAILOR_RETURN_IF_ERROR(
      ExpectDims("seq_lens", args.seq_lens, 0, rows, "q.dims[0]"));
  if (!args.seq_lens.is_contiguous()) {
    return Invalid("seq_lens", "must be contiguous");
  }
  return absl::OkStatus();
}

absl::Status CheckScales(const RunDecodeArgs& args) {
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

}  // namespace

absl::StatusOr<DecodeShape> CheckDecodeShape(const DecodeShapeFields& f,
                                             absl::string_view prefix,
                                             const DecodeShapeNames& names) {
  auto field = [&](absl::string_view name) {
    return absl::StrCat(prefix, name);
  };
  if (f.num_kv_heads < 1 || f.num_kv_heads > attention::kMaxHeads) {
    return Invalid(field(names.num_kv_heads),
                   absl::StrCat("must be in [1, ", attention::kMaxHeads,
                                "], got ", f.num_kv_heads));
  }
  if (f.num_qo_heads < 1 || f.num_qo_heads > attention::kMaxHeads ||
      f.num_qo_heads % f.num_kv_heads != 0) {
    return Invalid(
        field(names.num_qo_heads),
        absl::StrCat("must be in [1, ", attention::kMaxHeads,
                     "] and a multiple of ", names.num_kv_heads, " (",
                     f.num_kv_heads, "), got ", f.num_qo_heads));
  }
  const int64_t group = f.num_qo_heads / f.num_kv_heads;
  if (group > attention::kMaxGroup) {
    return Invalid(field(names.num_qo_heads),
                   absl::StrCat(names.num_qo_heads, " / ", names.num_kv_heads,
                                " (the GQA group) must be <= ",
                                attention::kMaxGroup, ", got ", group));
  }
  if (f.head_dim != 64 && f.head_dim != 128 && f.head_dim != 256) {
    return Invalid(field(names.head_dim),
                   absl::StrCat("must be 64, 128 or 256, got ", f.head_dim));
  }
  if (f.page_size < 1 || f.page_size > attention::kMaxPageSize) {
    return Invalid(field(names.page_size),
                   absl::StrCat("must be in [1, ", attention::kMaxPageSize,
                                "], got ", f.page_size));
  }
  if (f.dtype != DType::kBF16 && f.dtype != DType::kF16) {
    return Invalid(field(names.dtype), absl::StrCat("must be bf16 or f16, got ",
                                                    DTypeName(f.dtype)));
  }
  return DecodeShape{.dtype = f.dtype,
                     .head_dim = f.head_dim,
                     .group = group,
                     .page_size = f.page_size,
                     .num_kv_heads = f.num_kv_heads};
}

absl::Status CheckRunDecodeArgs(const RunDecodeArgs& args,
                                const DecodeShape& shape, int64_t num_qo_heads,
                                const plan::DecodePlan& plan, Device device) {
  const int64_t batch = plan.batch();
  TAILOR_RETURN_IF_ERROR(
      CheckQueryLike("q", args.q, shape, num_qo_heads, batch, device));
  const int64_t rows = args.q.dims[0];
  TAILOR_RETURN_IF_ERROR(CheckCache("k_cache", args.k_cache, shape, device));
  TAILOR_RETURN_IF_ERROR(CheckCache("v_cache", args.v_cache, shape, device));
  TAILOR_RETURN_IF_ERROR(ExpectDims("v_cache", args.v_cache, 0,
                                    args.k_cache.dims[0],
                                    "k_cache.dims[0] (num_pages)"));
  TAILOR_RETURN_IF_ERROR(CheckIndexTensors(args, rows, shape, plan, device));
  TAILOR_RETURN_IF_ERROR(
      CheckQueryLike("out", args.out, shape, num_qo_heads, batch, device));
  TAILOR_RETURN_IF_ERROR(ExpectDims("out", args.out, 0, rows, "q.dims[0]"));
  if (args.lse.has_value()) {
    const TensorRef& lse = *args.lse;
    TAILOR_RETURN_IF_ERROR(ExpectView("lse", lse, 2, DType::kF32, device));
    TAILOR_RETURN_IF_ERROR(ExpectDims("lse", lse, 0, rows, "q.dims[0]"));
    TAILOR_RETURN_IF_ERROR(
        ExpectDims("lse", lse, 1, num_qo_heads, "num_qo_heads of the plan"));
    if (!lse.is_contiguous()) return Invalid("lse", "must be contiguous");
    TAILOR_RETURN_IF_ERROR(ExpectApart("lse", lse, "out", args.out));
    TAILOR_RETURN_IF_ERROR(ExpectApart("lse", lse, "q", args.q));
  }
  TAILOR_RETURN_IF_ERROR(CheckScales(args));
  TAILOR_RETURN_IF_ERROR(ExpectApart("out", args.out, "q", args.q));
  TAILOR_RETURN_IF_ERROR(ExpectApart("out", args.out, "k_cache", args.k_cache));
  TAILOR_RETURN_IF_ERROR(ExpectApart("out", args.out, "v_cache", args.v_cache));
  return absl::OkStatus();
}

std::string BadPageText(int64_t seq, int64_t slot, int32_t page,
                        int64_t num_pages) {
  return absl::StrCat("block_table[", seq, ",", slot, "]: page id ", page,
                      " is outside [0, ", num_pages, ")");
}

std::string BadSeqLenText(int64_t seq, int32_t device_len,
                          int64_t planned_len) {
  return absl::StrCat("seq_lens[", seq, "]: ", device_len, " differs from ",
                      planned_len, ", the length PlanDecode planned");
}

std::string TooManyPagesText(int64_t seq, int32_t pages, int64_t max_pages) {
  return absl::StrCat("block_table: sequence ", seq, " needs ", pages,
                      " pages, more than dims[1] (max_pages) = ", max_pages,
                      "; plan within the captured block table");
}

absl::Status CheckRunDecodeContents(const RunDecodeArgs& args,
                                    const plan::DecodePlan& plan,
                                    int64_t page_size) {
  const int32_t* lens = args.seq_lens.as<int32_t>();
  const int32_t* table = args.block_table.as<int32_t>();
  const int64_t num_pages = args.k_cache.dims[0];
  for (int64_t b = 0; b < plan.batch(); ++b) {
    const int32_t planned = plan.seq_lens()[b];
    if (lens[b] != planned) {
      return absl::InvalidArgumentError(BadSeqLenText(b, lens[b], planned));
    }
    const int64_t pages = (planned + page_size - 1) / page_size;
    const int32_t* row = table + b * args.block_table.strides[0];
    for (int64_t j = 0; j < pages; ++j) {
      if (row[j] < 0 || row[j] >= num_pages) {
        return absl::InvalidArgumentError(BadPageText(b, j, row[j], num_pages));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tailor::internal
