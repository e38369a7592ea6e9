// Fuzzes the argument validation of every public moe:: entry
// (include/tailor/ops/moe.h) through the C++ API: sequences of Route,
// PlanRows, Pack, GroupedGemm, Combine, Experts and ReserveWorkspace on one
// Workspace, each with the tensors the op expects, then (sometimes) broken
// in one of the ways a caller can break them: dtype, rank, a dim (to any
// edge value), strides, a null pointer, the device, index contents, the
// policy. What must hold, per moe.h:
//   - every call returns OK, InvalidArgument, FailedPrecondition (the
//     Workspace was not routed / moved from, or, on the runtime without
//     JIT, the kernel is missing) or ResourceExhausted, with a message;
//   - an error launches nothing and leaves every output untouched, and an
//     InvalidArgument is decided before any kernel lookup;
//   - a failed Route or PlanRows leaves the Workspace not routed; a
//     successful Route is a stable sort of the assignments by local expert;
//   - no kernel reads or writes outside the tensors it is given: buffers end
//     at a PROT_NONE page (guarded_memory.h), and host code runs under
//     ASan/UBSan in `make fuzz`.
// Calls whose tensors all have memory and whose compiled-in values (H, N, K,
// I, k, tile) lie in small tables run on a JIT runtime whose kernels are
// cached on disk ($TAILOR_FUZZ_CACHE_DIR), so the kernel set stays bounded;
// any other call runs on a runtime with TAILOR_DISABLE_JIT, which checks
// everything but runs nothing. Calls whose documented workspace need exceeds
// 64 MiB are not made (they are legal; a fuzzer cannot afford them).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "guarded_memory.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"

namespace tailor::moe {
namespace {

using fuzz::FuzzInput;

constexpr size_t kMaxRealBytes = size_t{1} << 20;
constexpr size_t kMaxWorkspaceBytes = size_t{64} << 20;
constexpr int32_t kTileRows = 4;  // the tile of bounded (JIT) calls

bool InModelTable(int64_t d) { return d == 8 || d == 16; }

struct Runtimes {
  Runtime* jit = nullptr;
  Runtime* checks_only = nullptr;  // TAILOR_DISABLE_JIT, no disk cache
};

const Runtimes& GetRuntimes() {
  static const Runtimes runtimes = [] {
    Runtime::Options options;
    options.backend = BackendKind::kCpu;
    options.log_level = "off";
    options.cpu_threads = 1;
    const char* dir = std::getenv("TAILOR_FUZZ_CACHE_DIR");
    options.cache_dir = dir != nullptr ? dir : "";
    options.disable_disk_cache = dir == nullptr;
    Runtimes r;
    r.jit = Runtime::Create(options).value().release();
    options.disable_jit = true;
    options.disable_disk_cache = true;
    r.checks_only = Runtime::Create(options).value().release();
    return r;
  }();
  return runtimes;
}

// The model one input works in.
struct Model {
  DType dtype;
  int64_t tokens, topk, experts, hidden, intermediate;
  RoutingPolicy policy;
};

Model MakeModel(FuzzInput& in) {
  Model m = {.dtype = in.Bool() ? DType::kBF16 : DType::kF32,
             .tokens = in.InRange(0, 24),
             .topk = in.InRange(1, 4),
             .experts = in.InRange(1, 6),
             .hidden = in.Bool() ? 8 : 16,
             .intermediate = 8,
             .policy = {.tile_rows = kTileRows,
                        .tail = static_cast<TailPolicy>(in.InRange(0, 2))}};
  // Route refuses k > E (a token's k experts are distinct): keep the model
  // valid so that inputs reach the later ops; k > E still comes from the
  // num_experts and expert_map edge values.
  m.topk = std::min(m.topk, m.experts);
  return m;
}

// Values for the elements of an index tensor.
using IndexValue = std::function<int32_t(FuzzInput&, int64_t)>;

// The tensors of one call and what the checks need to know about them.
class Call {
 public:
  explicit Call(FuzzInput& in) : in_(in) {}

  FuzzInput& in() { return in_; }
  bool has_virtual_data() const { return has_virtual_data_; }

  // A tensor of `dims` and `dtype`, maybe broken; float contents.
  TensorRef Float(std::vector<int64_t> dims, DType dtype) {
    return Make(std::move(dims), dtype, nullptr);
  }
  // The same for an i32 index tensor whose elements come from `value`.
  TensorRef Index(std::vector<int64_t> dims, const IndexValue& value) {
    return Make(std::move(dims), DType::kI32, &value);
  }
  // Remembers an output's bytes, to check that an error leaves it alone.
  void Output(const TensorRef& t) {
    if (t.data != nullptr && Bytes(t) > 0 && Bytes(t) <= kMaxRealBytes &&
        !IsVirtual(t)) {
      outputs_.push_back({t, Snapshot(t)});
    }
  }
  // Bytes of memory behind t.data (0 for virtual or foreign data).
  size_t BackedBytes(const TensorRef& t) const {
    for (const auto& [data, bytes] : backed_)
      if (data == t.data) return bytes;
    return 0;
  }
  bool OutputsUnchanged() const {
    for (const auto& [t, bytes] : outputs_)
      if (Snapshot(t) != bytes) return false;
    return true;
  }

 private:
  // Elements spanned by t (0 if any dim is 0); -1 when a dim or stride is
  // negative or the span overflows.
  static int64_t SpanElements(const TensorRef& t) {
    if (t.rank < 0 || t.rank > kMaxRank) return -1;
    int64_t last = 0;
    for (int i = 0; i < t.rank; ++i) {
      if (t.dims[i] < 0 || t.strides[i] < 0) return -1;
      if (t.dims[i] == 0) return 0;
      int64_t step;
      if (__builtin_mul_overflow(t.dims[i] - 1, t.strides[i], &step) ||
          __builtin_add_overflow(last, step, &last))
        return -1;
    }
    return last + 1;
  }
  static size_t Bytes(const TensorRef& t) {
    const int64_t span = SpanElements(t);
    const size_t element = DTypeSize(t.dtype);
    if (span <= 0 || element == 0) return 0;
    if (static_cast<uint64_t>(span) > (uint64_t{1} << 50)) return ~size_t{0};
    return static_cast<size_t>(span) * element;
  }
  static bool IsVirtual(const TensorRef& t) {
    return fuzz::IsVirtualTensorData(t.data);
  }
  static std::string Snapshot(const TensorRef& t) {
    return std::string(static_cast<const char*>(t.data), Bytes(t));
  }

  // Breaks `t` in one way a caller could; true when its shape changed.
  bool Break(TensorRef& t) {
    const int dim = static_cast<int>(in_.InRange(0, kMaxRank - 1));
    switch (in_.InRange(0, 6)) {
      case 0:
        t.dtype = in_.Enum<DType>(8);  // 0 is not a DType
        return false;
      case 1:
        t.rank = in_.OneIn(4) ? in_.Take<int8_t>() : in_.InRange(0, kMaxRank);
        return true;
      case 2:
        t.dims[dim] = in_.EdgeValue();
        return true;
      case 3:
        t.dims[dim] += in_.Bool() ? 1 : -1;
        return true;
      case 4:
        t.strides[dim] = in_.OneIn(4) ? in_.EdgeValue() : in_.InRange(0, 3);
        return true;
      case 5:
        t.data = nullptr;
        return false;
      default:
        t.device = {.type = DeviceType::kCuda, .index = 0};
        return false;
    }
  }

  TensorRef Make(std::vector<int64_t> dims, DType dtype,
                 const IndexValue* value) {
    TensorRef t;
    t.dtype = dtype;
    t.rank = static_cast<int>(dims.size());
    int64_t stride = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      t.dims[i] = dims[i];
      t.strides[i] = stride;
      stride *= dims[i];
    }
    t.data = reinterpret_cast<void*>(16);  // replaced below unless broken
    const bool broken = in_.OneIn(10);
    if (broken) Break(t);
    if (t.data == nullptr) return t;
    const size_t bytes = Bytes(t);
    if (bytes > kMaxRealBytes && value != nullptr) {
      // Host code reads index tensors: a shape that claims more than the
      // fuzzer backs is made surely invalid instead of left a lie.
      t.dims[0] = -1;
      t.data = arena_.Allocate(16);
      return t;
    }
    if (bytes > kMaxRealBytes) {
      t.data = fuzz::VirtualTensorData(next_slot_++);
      has_virtual_data_ = true;
      return t;
    }
    t.data = arena_.Allocate(bytes > 0 ? bytes : 16);
    backed_.emplace_back(t.data, bytes);
    Fill(t, bytes, value);
    return t;
  }

  void Fill(const TensorRef& t, size_t bytes, const IndexValue* value) {
    if (value != nullptr) {
      // memcpy: a broken dtype (u8, ...) leaves the buffer unaligned for i32.
      auto* p = static_cast<unsigned char*>(t.data);
      for (size_t i = 0; i < bytes / 4; ++i) {
        const int32_t v = (*value)(in_, static_cast<int64_t>(i));
        std::memcpy(p + 4 * i, &v, 4);
      }
      return;
    }
    auto* p = static_cast<unsigned char*>(t.data);
    for (size_t i = 0; i < bytes; ++i)  // small, finite floats and bf16s
      p[i] = static_cast<unsigned char>(i % 4 == 3 ? 0x3e : i * 37);
  }

  FuzzInput& in_;
  fuzz::GuardedArena arena_;
  bool has_virtual_data_ = false;
  int next_slot_ = 0;
  std::vector<std::pair<TensorRef, std::string>> outputs_;
  std::vector<std::pair<const void*, size_t>> backed_;
};

// ---- Checks common to every call -------------------------------------------

struct Before {
  uint64_t lookups, launches;
};

Before Snap(Runtime& runtime) {
  StatsSnapshot s = runtime.stats();
  return {s.lookups, s.launches};
}

void CheckOutcome(const char* op, const absl::Status& status, Runtime& runtime,
                  const Before& before, const Call& call) {
  const absl::StatusCode code = status.code();
  FUZZ_CHECK(code == absl::StatusCode::kOk ||
             code == absl::StatusCode::kInvalidArgument ||
             code == absl::StatusCode::kFailedPrecondition ||
             code == absl::StatusCode::kResourceExhausted)
      << op << ": " << status;
  if (status.ok()) return;
  FUZZ_CHECK(!status.message().empty()) << op;
  const Before after = Snap(runtime);
  FUZZ_CHECK(after.launches == before.launches) << op << ": " << status;
  if (code == absl::StatusCode::kInvalidArgument) {
    FUZZ_CHECK(after.lookups == before.lookups)
        << op << " looked a kernel up before rejecting: " << status;
  }
  FUZZ_CHECK(call.OutputsUnchanged())
      << op << " wrote before failing: " << status;
}

// The runtime a call may use: the JIT one only when every tensor has memory
// and the kernels it can need are in the bounded set.
Runtime& Pick(const Call& call, bool bounded) {
  const Runtimes& r = GetRuntimes();
  return bounded && !call.has_virtual_data() ? *r.jit : *r.checks_only;
}

RoutingPolicy Policy(FuzzInput& in, const Model& m) {
  RoutingPolicy policy = m.policy;
  if (in.OneIn(12)) policy.tile_rows = static_cast<int32_t>(in.EdgeValue());
  if (in.OneIn(16)) policy.tail = in.Enum<TailPolicy>(3);
  return policy;
}

// ---- The ops ----------------------------------------------------------------

void CheckRouting(const Workspace& ws) {
  const TensorRef inverse = ws.inverse(), permutation = ws.permutation();
  const auto* inv = inverse.as<const int32_t>();
  const auto* perm = permutation.as<const int32_t>();
  for (int64_t i = 0; i < inverse.numel(); ++i) {
    if (inv[i] < 0) continue;
    FUZZ_CHECK(inv[i] < ws.num_rows() && perm[inv[i]] == i)
        << "assignment " << i;
  }
  const auto* offsets = ws.offsets().as<const int32_t>();
  for (int64_t e = 0; e < ws.num_experts(); ++e)
    FUZZ_CHECK(offsets[e] <= offsets[e + 1]);
  FUZZ_CHECK(offsets[ws.num_experts()] == ws.num_rows());
}

void RunRoute(Call& call, const Model& m, Workspace& ws) {
  FuzzInput& in = call.in();
  std::optional<TensorRef> map;
  int64_t id_limit = m.experts;
  if (in.OneIn(3)) {
    id_limit = in.InRange(1, 12);
    map = call.Index({id_limit}, [&](FuzzInput& f, int64_t) {
      return f.OneIn(16) ? f.Take<int32_t>()
                         : static_cast<int32_t>(f.InRange(-1, m.experts - 1));
    });
  }
  RouteArgs args{.topk_ids = call.Index(
                     {m.tokens, m.topk},
                     [&](FuzzInput& f, int64_t) {
                       return f.OneIn(32) ? f.Take<int32_t>()
                                          : static_cast<int32_t>(
                                                f.InRange(0, id_limit - 1));
                     }),
                 .num_experts = in.OneIn(16) ? in.EdgeValue() : m.experts,
                 .expert_map = map,
                 .policy = Policy(in, m)};
  Runtime& runtime = Pick(call, true);
  const Before before = Snap(runtime);
  absl::Status s = Route(runtime, args, ws);
  CheckOutcome("Route", s, runtime, before, call);
  FUZZ_CHECK(ws.routed() == s.ok()) << s;
  if (s.ok()) CheckRouting(ws);
}

void RunPlanRows(Call& call, const Model& m, Workspace& ws) {
  FuzzInput& in = call.in();
  PlanRowsArgs args{.counts = call.Index({in.InRange(1, 8)},
                                         [](FuzzInput& f, int64_t) {
                                           return f.OneIn(16)
                                                      ? f.Take<int32_t>()
                                                      : static_cast<int32_t>(
                                                            f.InRange(0, 12));
                                         }),
                    .policy = Policy(in, m)};
  // The plan holds a work item per tile: skip what cannot be afforded.
  {
    int64_t rows = 0;
    // memcpy: a broken dtype (u8, ...) leaves the counts unaligned for i32.
    const auto* bytes = static_cast<const unsigned char*>(args.counts.data);
    const size_t backed = call.BackedBytes(args.counts) / 4;
    for (size_t e = 0; e < backed; ++e) {
      int32_t count;
      std::memcpy(&count, bytes + 4 * e, 4);
      rows += std::max(count, 0);
    }
    const int64_t tile = std::clamp<int64_t>(args.policy.tile_rows, 1, 64);
    if (rows / tile * 16 > static_cast<int64_t>(kMaxWorkspaceBytes)) return;
  }
  Runtime& runtime = Pick(call, true);
  const Before before = Snap(runtime);
  absl::Status s = PlanRows(runtime, args, ws);
  CheckOutcome("PlanRows", s, runtime, before, call);
  FUZZ_CHECK(ws.routed() == s.ok()) << s;
}

// An index tensor of `dims` whose entries are in [lo, hi] (or anything).
TensorRef Entries(Call& call, std::vector<int64_t> dims, int64_t lo,
                  int64_t hi) {
  return call.Index(std::move(dims), [=](FuzzInput& f, int64_t) {
    return f.OneIn(32) || hi < lo ? f.Take<int32_t>()
                                  : static_cast<int32_t>(f.InRange(lo, hi));
  });
}

void RunPack(Call& call, const Model& m, const Workspace& ws) {
  FuzzInput& in = call.in();
  const bool from_ws = ws.routed() && ws.topk() > 0 && in.Bool();
  const int64_t k = from_ws ? ws.topk() : m.topk;
  const int64_t tokens = from_ws ? ws.num_tokens() : m.tokens;
  TensorRef permutation =
      from_ws ? ws.permutation()
              : Entries(call, {in.InRange(0, 32)}, 0, tokens * k - 1);
  PackArgs args{.hidden = call.Float({tokens, m.hidden}, m.dtype),
                .permutation = permutation,
                .topk = in.OneIn(16) ? in.EdgeValue() : k,
                .a = call.Float({permutation.dims[0], m.hidden}, m.dtype)};
  call.Output(args.a);
  Runtime& runtime = Pick(call, InModelTable(args.hidden.dims[1]));
  const Before before = Snap(runtime);
  absl::Status s = Pack(runtime, args);
  CheckOutcome("Pack", s, runtime, before, call);
  if (!s.ok() || &runtime != GetRuntimes().jit) return;
  const size_t row = args.hidden.dims[1] * DTypeSize(args.hidden.dtype);
  const auto* perm = args.permutation.as<const int32_t>();
  for (int64_t r = 0; r < args.a.dims[0]; ++r) {
    FUZZ_CHECK(std::memcmp(args.a.as<char>() + r * row,
                           args.hidden.as<char>() + perm[r] / args.topk * row,
                           row) == 0)
        << "Pack row " << r;
  }
}

void RunGroupedGemm(Call& call, const Model& m, const Workspace& ws) {
  FuzzInput& in = call.in();
  const int64_t n = in.Bool() ? 8 : 16, k = in.Bool() ? 8 : 16;
  const Epilogue epilogue = in.Enum<Epilogue>(2);
  const int64_t out = epilogue == Epilogue::kSiluAndMul ? n / 2 : n;
  GroupedGemmArgs args{.a = call.Float({ws.num_rows(), k}, m.dtype),
                       .w = call.Float({ws.num_experts(), n, k}, m.dtype),
                       .c = call.Float({ws.num_rows(), out}, m.dtype),
                       .epilogue = epilogue};
  call.Output(args.c);
  const bool bounded = InModelTable(args.a.dims[1]) &&
                       InModelTable(args.w.dims[1]) &&
                       ws.plan().tile_rows == kTileRows;
  Runtime& runtime = Pick(call, bounded);
  const Before before = Snap(runtime);
  CheckOutcome("GroupedGemm", GroupedGemm(runtime, args, ws), runtime, before,
               call);
}

void RunCombine(Call& call, const Model& m, const Workspace& ws) {
  FuzzInput& in = call.in();
  const bool from_ws = ws.routed() && ws.topk() > 0 && in.Bool();
  const int64_t tokens = from_ws ? ws.num_tokens() : m.tokens;
  const int64_t k = from_ws ? ws.topk() : m.topk;
  const int64_t rows = from_ws ? ws.num_rows() : in.InRange(0, 32);
  CombineArgs args{.c = call.Float({rows, m.hidden}, m.dtype),
                   .topk_weights = call.Float({tokens, k}, DType::kF32),
                   .inverse = from_ws
                                  ? ws.inverse()
                                  : Entries(call, {tokens, k}, -1, rows - 1),
                   .out = call.Float({tokens, m.hidden}, m.dtype)};
  call.Output(args.out);
  const int64_t topk = args.topk_weights.dims[1];
  const bool bounded = InModelTable(args.c.dims[1]) && topk >= 1 && topk <= 4;
  Runtime& runtime = Pick(call, bounded);
  const Before before = Snap(runtime);
  CheckOutcome("Combine", Combine(runtime, args), runtime, before, call);
}

// Bytes Experts keeps in the Workspace for these shapes (moe.h: R x (H + I)
// elements, R <= T * k); saturates instead of overflowing.
unsigned __int128 ExpertsWorkspaceBytes(const ExpertsArgs& a) {
  auto u = [](int64_t v) -> unsigned __int128 { return v < 0 ? 0 : v; };
  return u(a.topk_ids.dims[0]) * u(a.topk_ids.dims[1]) *
         (u(a.hidden.dims[1]) + u(a.w13.dims[1])) * 4;
}

void RunExperts(Call& call, const Model& m, Workspace& ws) {
  FuzzInput& in = call.in();
  const int64_t t = m.tokens, h = m.hidden, i = m.intermediate;
  ExpertsArgs args{.hidden = call.Float({t, h}, m.dtype),
                   .w13 = call.Float({m.experts, 2 * i, h}, m.dtype),
                   .w2 = call.Float({m.experts, h, i}, m.dtype),
                   .topk_weights = call.Float({t, m.topk}, DType::kF32),
                   .topk_ids = Entries(call, {t, m.topk}, 0, m.experts - 1),
                   .policy = Policy(in, m)};
  args.out = in.OneIn(4) ? args.hidden : call.Float({t, h}, m.dtype);
  if (in.OneIn(32)) args.activation = in.Enum<Activation>(1);
  if (ExpertsWorkspaceBytes(args) > kMaxWorkspaceBytes) return;
  if (args.out.data != args.hidden.data) call.Output(args.out);
  const int64_t topk = args.topk_ids.dims[1];
  const bool bounded = InModelTable(args.hidden.dims[1]) &&
                       InModelTable(args.w13.dims[1] / 2) &&
                       args.w13.dims[1] % 2 == 0 && topk >= 1 && topk <= 4 &&
                       args.policy.tile_rows == kTileRows;
  Runtime& runtime = Pick(call, bounded);
  const Before before = Snap(runtime);
  absl::Status s = Experts(runtime, args, ws);
  CheckOutcome("Experts", s, runtime, before, call);
}

void RunReserve(Call& call, const Model& m, Workspace& ws) {
  FuzzInput& in = call.in();
  auto pick = [&](int64_t usual) {
    return in.OneIn(8) ? in.EdgeValue() : usual;
  };
  WorkspaceLimits limits{.max_tokens = pick(m.tokens),
                         .topk = pick(m.topk),
                         .num_experts = pick(m.experts),
                         .hidden = pick(m.hidden),
                         .intermediate = pick(m.intermediate),
                         .dtype = in.OneIn(16) ? in.Enum<DType>(8) : m.dtype,
                         .policy = Policy(in, m)};
  auto u = [](int64_t v) -> unsigned __int128 { return v < 0 ? 0 : v; };
  const unsigned __int128 need =
      u(limits.max_tokens) * u(limits.topk) *
          (u(limits.hidden) + u(limits.intermediate) + 4) * 4 +
      u(limits.num_experts) * 32;
  if (need > kMaxWorkspaceBytes) return;
  // Host reservation only: both runtimes are CPU, none launches.
  absl::Status s = ReserveWorkspace(Pick(call, false), limits, ws);
  FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kInvalidArgument ||
             s.code() == absl::StatusCode::kFailedPrecondition ||
             s.code() == absl::StatusCode::kResourceExhausted)
      << s;
}

}  // namespace
}  // namespace tailor::moe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::moe;
  tailor::fuzz::FuzzInput in(data, size);
  const Model model = MakeModel(in);
  auto ws = std::make_unique<Workspace>();
  for (int step = in.InRange(1, 4); step > 0 && !in.empty(); --step) {
    Call call(in);
    switch (in.InRange(0, 7)) {
      case 0:
      case 1:
        RunRoute(call, model, *ws);
        break;
      case 2:
        RunPlanRows(call, model, *ws);
        break;
      case 3:
        RunPack(call, model, *ws);
        break;
      case 4:
        RunGroupedGemm(call, model, *ws);
        break;
      case 5:
        RunCombine(call, model, *ws);
        break;
      case 6:
        RunExperts(call, model, *ws);
        break;
      default:
        if (in.OneIn(8)) {
          Workspace moved_to(std::move(*ws));  // later calls: moved from
        } else {
          RunReserve(call, model, *ws);
        }
    }
  }
  return 0;
}
