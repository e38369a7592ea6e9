// tailor-warmup — precompile every kernel a model's MoE layer can need.
//
// A server started with TAILOR_DISABLE_JIT=1 runs only kernels already in the
// disk cache; this tool puts them there. MoE kernel keys hold only static
// dims (H, I, k), the dtype, the tile and the tail class — never E, T or
// per-expert counts — so running Experts once for every row count 1..tile
// through ONE local expert (the others mapped away with expert_map) touches
// exactly the set of variants any routing of that model can produce.
//
//   tailor-warmup --model qwen3-30b-a3b [--dtype bf16|f32] [--tile-rows 16]
//                 [--tail pow2|exact|full] [--backend cpu] [--cache-dir DIR]
//   tailor-warmup --experts 8 --topk 2 --hidden 4096 --intermediate 14336
//   tailor-warmup --list-models
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/status.h"

namespace {

struct Model {
  int topk, hidden, intermediate;  // E does not reach any kernel key
};

const std::map<std::string, Model>& Models() {
  static const std::map<std::string, Model> models = {
      {"mixtral-8x7b", {2, 4096, 14336}},
      {"qwen3-30b-a3b", {8, 2048, 768}},
      {"qwen3-235b-a22b", {8, 4096, 1536}},
      {"deepseek-v3", {8, 7168, 2048}},
  };
  return models;
}

struct Flags {
  Model model = {0, 0, 0};
  tailor::DType dtype = tailor::DType::kBF16;
  tailor::moe::RoutingPolicy policy;
  tailor::Runtime::Options options;
};

absl::Status ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--list-models") {
      for (const auto& [name, m] : Models()) {
        std::printf("%-16s topk=%d hidden=%d intermediate=%d\n", name.c_str(),
                    m.topk, m.hidden, m.intermediate);
      }
      std::exit(0);
    }
    if (i + 1 >= argc)
      return absl::InvalidArgumentError(flag + ": needs a value");
    std::string value = argv[++i];
    int number = std::atoi(value.c_str());
    if (flag == "--model") {
      auto it = Models().find(value);
      if (it == Models().end()) {
        return absl::InvalidArgumentError("--model: unknown model \"" + value +
                                          "\" (see --list-models)");
      }
      f.model = it->second;
    } else if (flag == "--topk") {
      f.model.topk = number;
    } else if (flag == "--hidden") {
      f.model.hidden = number;
    } else if (flag == "--intermediate") {
      f.model.intermediate = number;
    } else if (flag == "--experts") {
      // Accepted for clarity; E is not part of any MoE kernel key.
    } else if (flag == "--dtype") {
      if (value != "bf16" && value != "f32") {
        return absl::InvalidArgumentError("--dtype: must be bf16 or f32, got " +
                                          value);
      }
      f.dtype = value == "bf16" ? tailor::DType::kBF16 : tailor::DType::kF32;
    } else if (flag == "--tile-rows") {
      f.policy.tile_rows = number;
    } else if (flag == "--tail") {
      using tailor::moe::TailPolicy;
      if (value == "pow2")
        f.policy.tail = TailPolicy::kNextPowerOfTwo;
      else if (value == "exact")
        f.policy.tail = TailPolicy::kExact;
      else if (value == "full")
        f.policy.tail = TailPolicy::kFullTile;
      else
        return absl::InvalidArgumentError(
            "--tail: must be pow2, exact or full, got " + value);
    } else if (flag == "--backend") {
      if (value == "cpu")
        f.options.backend = tailor::BackendKind::kCpu;
      else if (value == "cuda")
        f.options.backend = tailor::BackendKind::kCuda;
      else
        return absl::InvalidArgumentError(
            "--backend: must be cpu or cuda, got " + value);
    } else if (flag == "--cache-dir") {
      f.options.cache_dir = value;
    } else {
      return absl::InvalidArgumentError("unknown flag " + flag);
    }
  }
  if (f.model.topk <= 0 || f.model.hidden <= 0 || f.model.intermediate <= 0) {
    return absl::InvalidArgumentError(
        "give --model NAME, or --topk, --hidden and --intermediate (all > 0)");
  }
  return absl::OkStatus();
}

// One Experts call with `tokens` tokens whose slot 0 goes to the one local
// expert and whose other slots go to experts mapped away: the local expert
// gets exactly `tokens` rows.
absl::Status RunOnce(tailor::Runtime& runtime, const Flags& f, int tokens,
                     tailor::moe::Workspace& ws) {
  using tailor::TensorRef;
  const int64_t k = f.model.topk, H = f.model.hidden, I = f.model.intermediate;
  const size_t elem = tailor::DTypeSize(f.dtype);
  std::vector<char> hidden(tokens * H * elem, 0), out(tokens * H * elem, 0);
  std::vector<char> w13(2 * I * H * elem, 0), w2(H * I * elem, 0);
  std::vector<int32_t> ids(tokens * k), map(k, -1);
  std::vector<float> weights(tokens * k, 1.0f / k);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) ids[t * k + j] = j;
  map[0] = 0;
  return tailor::moe::Experts(
      runtime,
      {.hidden = TensorRef::Contiguous(hidden.data(), f.dtype, {tokens, H}),
       .w13 = TensorRef::Contiguous(w13.data(), f.dtype, {1, 2 * I, H}),
       .w2 = TensorRef::Contiguous(w2.data(), f.dtype, {1, H, I}),
       .topk_weights = TensorRef::Contiguous(weights.data(),
                                             tailor::DType::kF32, {tokens, k}),
       .topk_ids =
           TensorRef::Contiguous(ids.data(), tailor::DType::kI32, {tokens, k}),
       .expert_map =
           TensorRef::Contiguous(map.data(), tailor::DType::kI32, {k}),
       .policy = f.policy,
       .out = TensorRef::Contiguous(out.data(), f.dtype, {tokens, H})},
      ws);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.options.backend = tailor::BackendKind::kCpu;
  flags.options.log_level = "warn";
  if (absl::Status s = ParseFlags(argc, argv, flags); !s.ok()) {
    std::fprintf(stderr, "tailor-warmup: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  auto runtime = tailor::Runtime::Create(flags.options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "tailor-warmup: %s\n",
                 runtime.status().ToString().c_str());
    return 1;
  }
  if ((*runtime)->cache_dir().empty()) {
    std::fprintf(
        stderr, "tailor-warmup: no usable disk cache: nothing would persist\n");
    return 1;
  }
  tailor::moe::Workspace ws;
  // The first step resolves the policy's tile rows (0: the backend's choice).
  for (int tokens = 1; tokens == 1 || tokens <= ws.plan().tile_rows; ++tokens) {
    if (absl::Status s = RunOnce(**runtime, flags, tokens, ws); !s.ok()) {
      std::fprintf(stderr, "tailor-warmup: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  tailor::StatsSnapshot stats = (*runtime)->stats();
  uint64_t kernels = 0;
  for (const auto& [op, n] : stats.specializations_per_op) kernels += n;
  std::printf(
      "tailor-warmup: %llu kernels ready in %s (%llu compiled in %.2f s, %llu "
      "already on disk)\n",
      static_cast<unsigned long long>(kernels), (*runtime)->cache_dir().c_str(),
      static_cast<unsigned long long>(stats.compiles),
      stats.compile_seconds.sum,
      static_cast<unsigned long long>(stats.disk_hits));
  for (const auto& [op, n] : stats.specializations_per_op) {
    std::printf("  %-18s %llu variants\n", op.c_str(),
                static_cast<unsigned long long>(n));
  }
  return 0;
}
