// The FP8 MoE CPU templates (templates/cpu/moe/fp8_{pack,grouped_gemm}.h),
// compiled by the CPU JIT, against the host reference (ops/moe/fp8_quant.h):
// runtime/cpu/fp8.h's encoder bit for bit; the quantizing Pack bit for bit in
// every activation mode; the dequantizing grouped GEMM in every scale mode
// and epilogue, core tiles and tails, against fp64 on the dequantized inputs
// over awkward per-expert rows (empty experts, 1, T-1, T, T+1, 17, 577),
// K and N not multiples of 128, outputs NaN-poisoned first.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "ops/moe/fp8_quant.h"
#include "templates/cpu/moe/fp8_params.h"

namespace tailor::internal {
namespace {

namespace k = ::tailor::kernels;

class Fp8CpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = cpu::CpuBackend::Create(4);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    key_.op = OpKind::kMoeGroupedGemm;
    key_.backend = BackendKind::kCpu;
    key_.SetArch(backend_->arch());
  }

  // Compiles `kernel` (a type in tailor::kernels) from `header`.
  std::shared_ptr<Kernel> Build(const std::string& header,
                                const std::string& kernel) {
    const KernelSource source = {
        .code = absl::StrCat("#include \"templates/cpu/moe/", header,
                             "\"\nTAILOR_CPU_ENTRY((tailor::kernels::", kernel,
                             "))\n"),
        .entry = "tailor_entry"};
    auto object = backend_->Compile(key_, source);
    EXPECT_TRUE(object.ok()) << object.status() << "\n" << source.code;
    if (!object.ok()) return nullptr;
    auto loaded = backend_->Load(key_, source, *object);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : nullptr;
  }

  template <typename P>
  void Launch(const Kernel& kernel, const P& params, int64_t items) {
    LaunchConfig config;
    config.grid.x = static_cast<uint32_t>(items);
    ASSERT_TRUE(backend_->Launch(kernel, config, &params, sizeof(P)).ok());
  }

  std::unique_ptr<cpu::CpuBackend> backend_;
  SpecKey key_;
};

std::vector<float> Randn(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

// ---- the encoder, through the Pack's static mode with scale 1 ---------------
TEST_F(Fp8CpuTest, EncoderMatchesTheReferenceBitForBit) {
  constexpr int kH = 256;
  std::vector<float> x;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> log2_magnitude(-14.0f, 10.0f);
  for (int code = 0; code < 0x7e; ++code) {  // every tie and its neighbours
    const float mid = (E4m3ToFloat(code) + E4m3ToFloat(code + 1)) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
      x.insert(x.end(), {v, -v});
  }
  for (float v : {0.0f, -0.0f, 448.0f, 464.0f, 1e30f,
                  std::numeric_limits<float>::infinity(), std::nanf(""), 1e-30f,
                  std::ldexp(1.0f, -10), std::ldexp(3.0f, -10)}) {
    x.insert(x.end(), {v, -v});
  }
  while (x.size() % kH != 0 || x.size() < 64 * kH) {
    const float v = std::exp2(log2_magnitude(rng));
    x.push_back(x.size() % 2 ? -v : v);
  }
  const int64_t rows = static_cast<int64_t>(x.size()) / kH;
  std::vector<int32_t> permutation(rows);
  for (int64_t r = 0; r < rows; ++r) permutation[r] = static_cast<int32_t>(r);
  std::vector<uint8_t> q(x.size(), 0x55);
  const float one = 1.0f;
  const k::MoeFp8PackParams params = {.hidden = x.data(),
                                      .permutation = permutation.data(),
                                      .a = q.data(),
                                      .a_scales = nullptr,
                                      .static_scale = &one,
                                      .topk = 1,
                                      .tokens = rows,
                                      .scale_rows = 0};
  auto kernel =
      Build("fp8_pack.h", absl::StrCat("MoeFp8PackKernel<float, ", kH, ", ",
                                       k::kMoeFp8PackStatic, ">"));
  ASSERT_NE(kernel, nullptr);
  Launch(*kernel, params, rows);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(q[i], E4m3FromFloat(x[i])) << "x = " << x[i];
  }
}

uint16_t Bf16Bits(float x) {  // round to nearest even (finite inputs)
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float Bf16Value(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

// ---- the quantizing Pack ----------------------------------------------------
// Rows gathered through a permutation with -1 entries (left untouched),
// groups (H a multiple of 128 and not) and per-token scales, bit for bit.
TEST_F(Fp8CpuTest, PackQuantizesLikeTheReference) {
  constexpr int64_t kTokens = 17, kTopk = 2, kScaleRows = 40;
  for (int64_t h : {384, 200}) {
    for (int mode : {k::kMoeFp8PackGroups, k::kMoeFp8PackPerToken}) {
      SCOPED_TRACE(absl::StrCat("H=", h, " mode=", mode));
      std::vector<float> values = Randn(kTokens * h, 3.0f, 5);
      values[3 * h + 7] = std::nanf("");  // token 3: a NaN group
      for (int64_t c = 0; c < 128 && c < h; ++c) values[5 * h + c] = 0.0f;
      std::vector<uint16_t> hidden(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        hidden[i] = std::isnan(values[i]) ? 0x7fc0 : Bf16Bits(values[i]);
      }
      std::vector<int32_t> permutation(kTokens * kTopk + 3, -1);
      for (int64_t r = 0; r < kTokens * kTopk; ++r) {
        permutation[r] = static_cast<int32_t>((r * 7) % (kTokens * kTopk));
      }
      const int64_t rows = static_cast<int64_t>(permutation.size());
      const int64_t groups = mode == k::kMoeFp8PackGroups ? (h + 127) / 128 : 1;
      std::vector<uint8_t> a(rows * h, 0x55);
      std::vector<float> scales(groups * kScaleRows, -1.0f);
      const k::MoeFp8PackParams params = {.hidden = hidden.data(),
                                          .permutation = permutation.data(),
                                          .a = a.data(),
                                          .a_scales = scales.data(),
                                          .static_scale = nullptr,
                                          .topk = kTopk,
                                          .tokens = kTokens,
                                          .scale_rows = kScaleRows};
      auto kernel = Build(
          "fp8_pack.h", absl::StrCat("MoeFp8PackKernel<tailor::kernels::bf16, ",
                                     h, ", ", mode, ">"));
      ASSERT_NE(kernel, nullptr);
      Launch(*kernel, params, rows);
      for (int64_t r = 0; r < rows; ++r) {
        if (permutation[r] < 0) {
          for (int64_t c = 0; c < h; ++c) ASSERT_EQ(a[r * h + c], 0x55);
          continue;
        }
        const uint16_t* src = hidden.data() + permutation[r] / kTopk * h;
        std::vector<uint8_t> want(h);
        std::vector<float> want_scales(groups);
        const Fp8Blocks blocks = {1, mode == k::kMoeFp8PackGroups ? 128 : h};
        ASSERT_TRUE(
            Fp8Quantize(TensorRef::Contiguous(src, DType::kBF16, {1, h}),
                        blocks, want.data(), {want_scales.data(), 0, 1})
                .ok());
        for (int64_t c = 0; c < h; ++c) {
          ASSERT_EQ(a[r * h + c], want[c]) << "row " << r << " col " << c;
        }
        for (int64_t g = 0; g < groups; ++g) {
          const float got = mode == k::kMoeFp8PackGroups
                                ? scales[g * kScaleRows + r]
                                : scales[r];
          if (std::isnan(want_scales[g])) {
            EXPECT_TRUE(std::isnan(got)) << r;
          } else {
            EXPECT_EQ(got, want_scales[g]) << "row " << r << " group " << g;
          }
        }
      }
    }
  }
}

// ---- the dequantizing grouped GEMM -----------------------------------------
constexpr int64_t kTileRows = 16;
const std::vector<int64_t> kCounts = {1, 15, 16, 17, 0, 577, 31, 33};

struct GemmCase {
  int mode;      // k::kMoeFp8Scale*
  int epilogue;  // k::kMoeEpilogue*
  int64_t n, k;
  bool bf16_out;
};

std::string Describe(const GemmCase& c) {
  constexpr const char* kModes[] = {"Block", "PerTensor", "PerChannel"};
  constexpr const char* kEpilogues[] = {"Plain", "Silu", "SiluQuant"};
  return absl::StrCat(kModes[c.mode], kEpilogues[c.epilogue], "N", c.n, "K",
                      c.k, c.bf16_out ? "Bf16" : "F32");
}
void PrintTo(const GemmCase& c, std::ostream* os) { *os << Describe(c); }

// One matrix quantized by the reference, with its scale layout and the
// dequantized f64 values.
struct Quantized {
  std::vector<uint8_t> q;
  std::vector<float> scales;
  std::vector<double> deq;
};

Quantized QuantizeMatrix(const std::vector<float>& x, int64_t rows,
                         int64_t cols, Fp8Blocks blocks, Fp8ScaleLayout layout,
                         size_t scale_count) {
  Quantized out{std::vector<uint8_t>(rows * cols),
                std::vector<float>(scale_count, 0.0f),
                {}};
  layout.data = out.scales.data();
  EXPECT_TRUE(
      Fp8Quantize(TensorRef::Contiguous(x.data(), DType::kF32, {rows, cols}),
                  blocks, out.q.data(), layout)
          .ok());
  out.deq = Fp8Dequantize(out.q.data(), rows, cols, blocks, layout);
  return out;
}

// A [R, K] by the case's mode (block: K-block-major scales over scale_rows).
Quantized QuantizeA(const GemmCase& c, int64_t rows, int64_t scale_rows) {
  const std::vector<float> x = Randn(rows * c.k, 1.0f, 21);
  const int64_t k_blocks = (c.k + 127) / 128;
  if (c.mode == k::kMoeFp8ScaleBlock) {
    return QuantizeMatrix(x, rows, c.k, {1, 128}, {nullptr, 1, scale_rows},
                          k_blocks * scale_rows);
  }
  if (c.mode == k::kMoeFp8ScalePerChannel) {
    return QuantizeMatrix(x, rows, c.k, {1, c.k}, {nullptr, 1, 0}, rows);
  }
  return QuantizeMatrix(x, rows, c.k, {rows, c.k}, {nullptr, 0, 0}, 1);
}

// W [E, N, K], expert by expert, scales concatenated in the mode's layout.
Quantized QuantizeW(const GemmCase& c, int64_t experts) {
  Quantized all;
  const int64_t n_blocks = (c.n + 127) / 128, k_blocks = (c.k + 127) / 128;
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<float> x = Randn(c.n * c.k, 0.05f, 100 + e);
    Quantized one;
    if (c.mode == k::kMoeFp8ScaleBlock) {
      one = QuantizeMatrix(x, c.n, c.k, {128, 128}, {nullptr, k_blocks, 1},
                           n_blocks * k_blocks);
    } else if (c.mode == k::kMoeFp8ScalePerChannel) {
      one = QuantizeMatrix(x, c.n, c.k, {1, c.k}, {nullptr, 1, 0}, c.n);
    } else {
      one = QuantizeMatrix(x, c.n, c.k, {c.n, c.k}, {nullptr, 0, 0}, 1);
    }
    all.q.insert(all.q.end(), one.q.begin(), one.q.end());
    all.scales.insert(all.scales.end(), one.scales.begin(), one.scales.end());
    all.deq.insert(all.deq.end(), one.deq.begin(), one.deq.end());
  }
  return all;
}

// fp64 C [R, out] of the dequantized inputs (silu_and_mul when gated).
std::vector<double> ReferenceGemm(const GemmCase& c, const Quantized& a,
                                  const Quantized& w) {
  const bool gated = c.epilogue != k::kMoeEpilogueNone;
  const int64_t out_n = gated ? c.n / 2 : c.n;
  std::vector<double> out;
  int64_t row = 0;
  for (size_t e = 0; e < kCounts.size(); ++e) {
    for (int64_t i = 0; i < kCounts[e]; ++i, ++row) {
      std::vector<double> y(c.n);
      for (int64_t n = 0; n < c.n; ++n) {
        const double* wr = w.deq.data() + (e * c.n + n) * c.k;
        const double* ar = a.deq.data() + row * c.k;
        double sum = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) sum += ar[kk] * wr[kk];
        y[n] = sum;
      }
      for (int64_t o = 0; o < out_n; ++o) {
        out.push_back(gated ? y[o] / (1 + std::exp(-y[o])) * y[out_n + o]
                            : y[o]);
      }
    }
  }
  return out;
}

double RelErr(const std::vector<double>& got, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return std::nan("");
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// The plan's items of kTileRows-row tiles: the core, then per tail class
// (1, 2, 4, 8, 16: the smallest power of two >= the tail's rows) its tails.
std::vector<std::vector<k::MoeWorkItem>> PlanItems() {
  std::vector<std::vector<k::MoeWorkItem>> by_class(kTileRows + 1);
  int32_t row = 0;
  for (size_t e = 0; e < kCounts.size(); ++e) {
    const auto count = static_cast<int32_t>(kCounts[e]);
    for (int32_t t = 0; t + kTileRows <= count; t += kTileRows) {
      by_class[0].push_back({row + t, kTileRows, static_cast<int32_t>(e), 0});
    }
    const int32_t tail = count % kTileRows;
    if (tail > 0) {
      int32_t cls = 1;
      while (cls < tail) cls *= 2;
      by_class[cls].push_back(
          {row + count - tail, tail, static_cast<int32_t>(e), cls});
    }
    row += count;
  }
  return by_class;
}

// Half the spacing of e4m3 values around |x| <= 448 (the rounding bound).
double HalfStep(double x) {
  const double a = std::max(std::fabs(x), std::ldexp(1.0, -6));
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 4);
}

// The quantized epilogue: each scale amax(|ref|) / 448 of its row's group
// (to the f32 GEMM's error), each value the rounding of ref / scale.
void CheckQuantized(const std::vector<uint8_t>& q,
                    const std::vector<float>& scales,
                    const std::vector<double>& ref, int64_t rows, int64_t out_n,
                    int64_t scale_rows) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g * 128 < out_n; ++g) {
      const int64_t end = std::min(out_n, 128 * (g + 1));
      double amax = 0;
      for (int64_t o = 128 * g; o < end; ++o) {
        amax = std::max(amax, std::fabs(ref[r * out_n + o]));
      }
      const double want = std::max(amax, 1e-10) / 448;
      const double scale = scales[g * scale_rows + r];
      ASSERT_NEAR(scale, want, 1e-4 * want) << "row " << r << " group " << g;
      for (int64_t o = 128 * g; o < end; ++o) {
        const double x = std::clamp(ref[r * out_n + o] / scale, -448.0, 448.0);
        ASSERT_LE(std::fabs(E4m3ToFloat(q[r * out_n + o]) - x),
                  HalfStep(x) + 1e-4 * std::fabs(x) + 1e-6)
            << "row " << r << " col " << o << " x " << x;
      }
    }
  }
}

class Fp8CpuGemmTest : public Fp8CpuTest,
                       public ::testing::WithParamInterface<GemmCase> {};

TEST_P(Fp8CpuGemmTest, MatchesFp64OnTheDequantizedInputs) {
  const GemmCase c = GetParam();
  SCOPED_TRACE(Describe(c));
  const bool gated = c.epilogue != k::kMoeEpilogueNone;
  const bool quant = c.epilogue == k::kMoeEpilogueSiluAndMulQuant;
  int64_t rows = 0;
  for (int64_t count : kCounts) rows += count;
  const int64_t out_n = gated ? c.n / 2 : c.n, guard = 4;
  const int64_t scale_rows = (rows + guard + 3) / 4 * 4;
  const Quantized a = QuantizeA(c, rows, scale_rows);
  const Quantized w = QuantizeW(c, static_cast<int64_t>(kCounts.size()));
  const std::vector<double> ref = ReferenceGemm(c, a, w);

  // Outputs poisoned: NaN (f32, bf16) or 0xff (e4m3), guard rows past R.
  const size_t elem = quant ? 1 : c.bf16_out ? 2 : 4;
  std::vector<uint8_t> out((rows + guard) * out_n * elem);
  if (quant) {
    std::fill(out.begin(), out.end(), 0xff);
  } else {
    for (size_t i = 0; i < out.size() / elem; ++i) {
      const float nan = std::nanf("");
      const uint16_t h = 0x7fc0;
      std::memcpy(out.data() + i * elem,
                  c.bf16_out ? static_cast<const void*>(&h) : &nan, elem);
    }
  }
  const std::vector<uint8_t> poisoned = out;
  const int64_t groups = (out_n + 127) / 128;
  std::vector<float> c_scales(groups * scale_rows, std::nanf(""));
  const int64_t tile_n = quant ? k::kMoeFp8GemmQuantTileN : k::kMoeFp8GemmTileN;
  const int64_t per_tile = gated ? tile_n / 2 : tile_n;
  const int64_t n_tiles = (out_n + per_tile - 1) / per_tile;
  const std::vector<std::vector<k::MoeWorkItem>> plan = PlanItems();
  for (int64_t cls = 0; cls <= kTileRows; ++cls) {
    if (plan[cls].empty()) continue;
    auto kernel =
        Build("fp8_grouped_gemm.h",
              absl::StrCat("MoeFp8GroupedGemmKernel<",
                           c.bf16_out ? "tailor::kernels::bf16" : "float", ", ",
                           c.n, ", ", c.k, ", ", kTileRows, ", ", cls, ", ",
                           c.epilogue, ", ", c.mode, ">"));
    ASSERT_NE(kernel, nullptr);
    const k::MoeFp8GroupedGemmParams params = {
        .a = a.q.data(),
        .a_scales = a.scales.data(),
        .w = w.q.data(),
        .w_scales = w.scales.data(),
        .c = out.data(),
        .c_scales = c_scales.data(),
        .work = plan[cls].data(),
        .num_work = static_cast<int64_t>(plan[cls].size()),
        .a_scale_rows = scale_rows,
        .c_scale_rows = scale_rows};
    Launch(*kernel, params, params.num_work * n_tiles);
  }
  std::vector<double> got(rows * out_n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_n; ++o) {
      const int64_t i = r * out_n + o;
      if (quant) {
        got[i] =
            E4m3ToFloat(out[i]) * double{c_scales[o / 128 * scale_rows + r]};
      } else if (c.bf16_out) {
        uint16_t h;
        std::memcpy(&h, out.data() + 2 * i, 2);
        got[i] = Bf16Value(h);
      } else {
        float f;
        std::memcpy(&f, out.data() + 4 * i, 4);
        got[i] = f;
      }
    }
  }
  const double err = RelErr(got, ref);
  // e4m3 keeps 3 mantissa bits: about 2.5 % norm-wise; bf16 out 2^-9.
  EXPECT_LT(err, quant ? 0.05 : 5e-3) << "rel err " << err;
  for (size_t i = rows * out_n * elem; i < out.size(); ++i) {
    ASSERT_EQ(out[i], poisoned[i]) << "guard byte " << i;
  }
  if (quant) CheckQuantized(out, c_scales, ref, rows, out_n, scale_rows);
}

INSTANTIATE_TEST_SUITE_P(
    ScaleModesAndEpilogues, Fp8CpuGemmTest,
    ::testing::Values(
        // Block scales, K and N not multiples of 128 (ragged last blocks).
        GemmCase{k::kMoeFp8ScaleBlock, k::kMoeEpilogueNone, 200, 300, true},
        GemmCase{k::kMoeFp8ScaleBlock, k::kMoeEpilogueSiluAndMul, 512, 256,
                 false},
        GemmCase{k::kMoeFp8ScaleBlock, k::kMoeEpilogueSiluAndMulQuant, 512, 384,
                 false},
        GemmCase{k::kMoeFp8ScaleBlock, k::kMoeEpilogueSiluAndMulQuant, 400, 256,
                 false},
        GemmCase{k::kMoeFp8ScalePerTensor, k::kMoeEpilogueNone, 256, 256, true},
        GemmCase{k::kMoeFp8ScalePerTensor, k::kMoeEpilogueSiluAndMul, 256, 128,
                 false},
        GemmCase{k::kMoeFp8ScalePerChannel, k::kMoeEpilogueNone, 96, 256,
                 false},
        GemmCase{k::kMoeFp8ScalePerChannel, k::kMoeEpilogueSiluAndMul, 256, 200,
                 true}),
    [](const ::testing::TestParamInfo<GemmCase>& info) {
      return Describe(info.param);
    });

}  // namespace
}  // namespace tailor::internal
