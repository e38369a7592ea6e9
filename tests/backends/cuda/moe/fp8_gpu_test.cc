// moe::GroupedGemm with FP8 (e4m3) operands on a CUDA device, the kernel
// built from its typed spec, on both kernels (parameter: the tuning keys;
// "" is the device's choice, the Hopper kernel on sm_90a; moe.gemm=portable
// the mma.sync kernel that converts e4m3 in registers, what every other
// sm_80+ device runs), and on the generic kernel that serves either path's
// cold keys in background JIT (JIT disabled: zero compiles): against f64 on the dequantized inputs (per-GEMM
// relative error < 5e-3), over the device Route of awkward ragged steps
// (empty experts, one expert with most rows, T - 1, T, T + 1 around the
// tile, 577, decode-sized tiles), outputs poisoned first; the quantizing
// silu_and_mul epilogue against the reference quantizer; a launch replayed
// on the same plan; the per-tensor and per-channel modes (scales applied to
// the accumulators). Skips without a device.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/moe/cuda_test_util.h"
#include "ops/moe/fp8_test_util.h"

namespace tailor::moe::testing {
namespace {

constexpr int64_t kExperts = 8, kTopk = 2;

int64_t ScaleRows(int64_t rows) { return (rows + 3) / 4 * 4; }

double Dot(const double* p, const double* q, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i] * q[i];
  return sum;
}

struct Fp8Case {
  int64_t tokens, n, k;
  int32_t tile_rows;
  bool quantized;  // gate|up with the quantizing epilogue (block mode)
  ScaleMode mode = ScaleMode::kBlock;
  bool gated = quantized;  // silu_and_mul (bf16 C unless quantized)
};

// Per tensor: A's static scale (|x| <= 2 stays inside e4m3's range).
constexpr float kStaticA = 0.01f;

// A's scales in `mode`'s layout: [K/128, S] (block), [R], [1].
HostTensor AScales(ScaleMode mode, int64_t rows, int64_t k) {
  if (mode == ScaleMode::kBlock) {
    return HostTensor(DType::kF32, {k / 128, ScaleRows(rows)});
  }
  HostTensor scales(DType::kF32,
                    {mode == ScaleMode::kPerChannel ? rows : int64_t{1}});
  if (mode == ScaleMode::kPerTensor) scales.set(0, kStaticA);
  return scales;
}

class MoeFp8CudaTest : public MoeCudaTest,
                       public ::testing::WithParamInterface<KernelChoice> {
 protected:
  void SetUp() override { SetUpWith(GetParam()); }
  // The kernel the launches must have run.
  std::string ExpectedKernel() {
    if (GetParam().generic_only) return "cuda.generic_mma_fp8";
    const bool hopper =
        env_->backend().arch() == "sm_90a" && GetParam().tuning.empty();
    return hopper ? "cuda.sm90_tma_wgmma_fp8" : "cuda.sm80_mma_fp8";
  }

  // Routes a fresh step, runs the case's GEMM twice (the second on the same
  // plan and buffers) and checks the first R rows of C each time.
  void Run(const Fp8Case& g, std::mt19937_64& rng,
           Spread spread = Spread::kSubset) {
    HostTensor ids = RandomTopkIds(rng, g.tokens, kTopk, kExperts, spread);
    DeviceTensor d_ids = ToDevice(ids);
    Workspace ws;
    TAILOR_ASSERT_OK(ReserveWorkspace(runtime(),
                                      {.max_tokens = g.tokens,
                                       .topk = kTopk,
                                       .num_experts = kExperts,
                                       .policy = {.tile_rows = g.tile_rows}},
                                      ws));
    TAILOR_ASSERT_OK(Route(runtime(),
                           {.topk_ids = d_ids.ref(),
                            .num_experts = kExperts,
                            .policy = {.tile_rows = g.tile_rows}},
                           ws));
    const int64_t rows = ws.num_rows(), srows = ScaleRows(rows);
    const ReferenceRouting ref =
        ReferenceRoute(ids, nullptr, kExperts, g.tokens, kTopk);
    std::vector<float> x(static_cast<size_t>(rows * g.k));
    std::uniform_real_distribution<float> dist(-2, 2);
    for (float& v : x) v = dist(rng);
    HostTensor a(DType::kF8E4M3, {rows, g.k});
    HostTensor a_scale = AScales(g.mode, rows, g.k);
    const std::vector<double> ad = QuantizeRows(
        x, rows, g.k, g.mode, kStaticA, static_cast<uint8_t*>(a.ref().data),
        static_cast<float*>(a_scale.ref().data), srows);
    const Fp8Weights w = MakeFp8Weights(rng, g.mode, kExperts, g.n, g.k);
    const std::vector<double> c_ref = Reference(ad, w, ref.offsets, g);
    const int64_t out = g.gated ? g.n / 2 : g.n;
    HostTensor c(g.quantized ? DType::kF8E4M3 : DType::kBF16, {rows, out});
    HostTensor c_scale(DType::kF32, {(out + 127) / 128, srows});
    if (g.quantized) {
      std::memset(const_cast<void*>(c.ref().data), 0x7f, rows * out);
    } else {
      c.Poison();
    }
    c_scale.Poison();
    DeviceTensor d_a = ToDevice(a), d_as = ToDevice(a_scale),
                 d_w = ToDevice(w.q), d_ws = ToDevice(w.scales),
                 d_c = ToDevice(c), d_cs = ToDevice(c_scale);
    GroupedGemmArgs args = {
        .a = d_a.ref(),
        .w = d_w.ref(),
        .c = d_c.ref(),
        .epilogue = g.gated ? Epilogue::kSiluAndMul : Epilogue::kNone,
        .quant = {
            .mode = g.mode, .a_scale = d_as.ref(), .w_scale = d_ws.ref()}};
    if (g.quantized) args.quant.c_scale = d_cs.ref();
    const int64_t useful = ref.offsets.back();
    for (int launch = 0; launch < 2; ++launch) {
      SCOPED_TRACE(absl::StrCat("launch ", launch));
      TAILOR_ASSERT_OK(GroupedGemm(runtime(), args, ws));
      // A quantized output may land one e4m3 step (1/16 to 1/8 of the
      // value) off the reference where the f32 and f64 SiLU-and-mul round
      // to either side of a boundary: a few such elements cost ~5e-3.
      EXPECT_LT(Error(d_c.Download(), d_cs.Download(), c_ref, useful, out,
                      srows, g.quantized),
                g.quantized ? 2e-2 : 5e-3);
    }
    EXPECT_EQ(ws.plan().gemms.back().kernel.rfind(ExpectedKernel(), 0), 0u)
        << ws.plan().ToString();
    if (GetParam().generic_only) {
      EXPECT_EQ(runtime().stats().compiles, 0u);
    }
    EXPECT_EQ(ws.plan().gemms.back().Feature("scale_mode").value_or(""),
              g.mode == ScaleMode::kBlock        ? "block"
              : g.mode == ScaleMode::kPerChannel ? "per_channel"
                                                 : "per_tensor");
  }

  // f64 C on the dequantized inputs; gated: silu_and_mul rounded to f32 and
  // requantized by the reference quantizer (what the kernel's epilogue
  // writes), dequantized again.
  static std::vector<double> Reference(const std::vector<double>& ad,
                                       const Fp8Weights& w,
                                       const std::vector<int32_t>& offsets,
                                       const Fp8Case& g) {
    const int64_t rows = offsets.back(), out = g.gated ? g.n / 2 : g.n;
    std::vector<double> acc(g.n), c(static_cast<size_t>(rows * out));
    std::vector<float> act(out);
    std::vector<uint8_t> q(out);
    std::vector<float> scales((out + 127) / 128);
    for (size_t e = 0; e + 1 < offsets.size(); ++e) {
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        for (int64_t col = 0; col < g.n; ++col) {
          acc[col] =
              Dot(&w.dequantized[(e * g.n + col) * g.k], &ad[r * g.k], g.k);
        }
        if (!g.gated) {
          std::copy(acc.begin(), acc.end(), c.begin() + r * out);
          continue;
        }
        for (int64_t i = 0; i < out; ++i) {
          act[i] = static_cast<float>(Silu(acc[i]) * acc[out + i]);
        }
        if (!g.quantized) {
          for (int64_t i = 0; i < out; ++i) {
            c[r * out + i] = Silu(acc[i]) * acc[out + i];
          }
          continue;
        }
        const std::vector<double> d = QuantizeRows(
            act, 1, out, ScaleMode::kBlock, 0, q.data(), scales.data(), 1);
        std::copy(d.begin(), d.end(), c.begin() + r * out);
      }
    }
    return c;
  }

  // ||C - ref|| / ||ref|| over the first `useful` rows (NaN: +inf).
  static double Error(const HostTensor& c, const HostTensor& c_scale,
                      const std::vector<double>& ref, int64_t useful,
                      int64_t out, int64_t srows, bool quantized) {
    const auto* q = static_cast<const uint8_t*>(c.ref().data);
    const auto* s = static_cast<const float*>(c_scale.ref().data);
    double diff = 0, norm = 0;
    for (int64_t r = 0; r < useful; ++r) {
      for (int64_t i = 0; i < out; ++i) {
        const double got = quantized ? double{E4m3ToFloat(q[r * out + i])} *
                                           s[(i / 128) * srows + r]
                                     : c.at(r * out + i);
        if (std::isnan(got)) return INFINITY;
        const double want = ref[r * out + i];
        diff += (got - want) * (got - want);
        norm += want * want;
      }
    }
    return norm == 0 ? (diff == 0 ? 0 : INFINITY) : std::sqrt(diff / norm);
  }
};

// Per tensor and per channel: the scales multiply the finished
// accumulators (bf16 C, with and without silu_and_mul), every tile kind.
TEST_P(MoeFp8CudaTest, PerTensorAndPerChannelGemmsMatchTheReference) {
  std::mt19937_64 rng(TestSeed());
  for (ScaleMode mode : {ScaleMode::kPerTensor, ScaleMode::kPerChannel}) {
    for (const Fp8Case& shape : std::vector<Fp8Case>{
             {577, 256, 256, 128, false},  // core tiles and tails
             {577, 512, 256, 128, false},  // gated
             {129, 256, 384, 64, false},
             {5, 256, 256, 16, false},  // decode: swap-AB tiles
             {3, 512, 256, 8, false},
         }) {
      Fp8Case g = shape;
      g.mode = mode;
      g.gated = g.n == 512;
      SCOPED_TRACE(absl::StrCat("mode=", static_cast<int>(mode),
                                " T=", g.tokens, " N=", g.n, " K=", g.k,
                                " tile=", g.tile_rows, " gated=", g.gated));
      Run(g, rng);
      if (HasFailure() || IsSkipped()) return;
    }
  }
}

TEST_P(MoeFp8CudaTest, BlockGemmMatchesTheReference) {
  std::mt19937_64 rng(TestSeed());
  for (const Fp8Case& g : std::vector<Fp8Case>{
           {577, 256, 256, 128, false},  // core tiles and tails
           {577, 512, 256, 128, true},   // quantizing gate|up
           {129, 256, 384, 64, false},
           {5, 256, 256, 16, false},  // decode: swap-AB tiles
           {3, 512, 256, 8, true},
       }) {
    SCOPED_TRACE(absl::StrCat("T=", g.tokens, " N=", g.n, " K=", g.k,
                              " tile=", g.tile_rows, " quant=", g.quantized));
    Run(g, rng);
  }
}

// The awkward-shape grid in block mode: Spread::kSubset routes every token
// to experts 0 and 1 (kTopk of kExperts: 6 experts empty), so they get
// T - 1, T, T + 1 rows around the tile T, or 1; 577 tokens with one expert
// taking every token's first slot. The quantizing gate|up and the bf16 down
// GEMM each.
TEST_P(MoeFp8CudaTest, BlockGemmAwkwardShapesMatchTheReference) {
  std::mt19937_64 rng(TestSeed());
  for (const int32_t tile : {16, 64}) {
    for (const int64_t tokens : {int64_t{1}, int64_t{tile} - 1, int64_t{tile},
                                 int64_t{tile} + 1, int64_t{577}}) {
      for (const bool quantized : {false, true}) {
        const Fp8Case g = {tokens, quantized ? 512 : 256, 256, tile, quantized};
        const Spread spread =
            tokens == 577 ? Spread::kOneExpert : Spread::kSubset;
        SCOPED_TRACE(
            absl::StrCat("T=", g.tokens, " tile=", tile, " quant=", quantized));
        Run(g, rng, spread);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, MoeFp8CudaTest,
                         ::testing::ValuesIn(Fp8KernelChoices()),
                         KernelChoiceName);

}  // namespace
}  // namespace tailor::moe::testing
