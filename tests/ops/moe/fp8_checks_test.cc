// The argument rules of the FP8 moe:: fronts (Experts and GroupedGemm with
// a scale mode): each broken rule gives InvalidArgument naming the argument
// and the rule, exactly, before anything is written.
#include <cstring>
#include <functional>
#include <vector>

#include "ops/moe/fp8_test_util.h"
#include "ops/moe/moe_test_util.h"

namespace tailor::moe::testing {
namespace {

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr int64_t kE = 4, kT = 3, kK = 2, kH = 256, kI = 128;

// A valid block-mode Experts call; tests break one rule at a time.
class Fp8ChecksTest : public ::testing::Test {
 protected:
  Fp8ChecksTest()
      : rng_(TestSeed()),
        w13_(MakeFp8Weights(rng_, ScaleMode::kBlock, kE, 2 * kI, kH)),
        w2_(MakeFp8Weights(rng_, ScaleMode::kBlock, kE, kH, kI)),
        hidden_(DType::kBF16, {kT, kH}),
        out_(DType::kBF16, {kT, kH}),
        weights_(DType::kF32, {kT, kK}),
        ids_(RandomTopkIds(rng_, kT, kK, kE, Spread::kUniform)),
        scalar_(DType::kF32, {1}) {
    hidden_.FillRandom(rng_);
    weights_.FillRandom(rng_);
    out_.Poison();
  }

  ExpertsArgs Args() const {
    return {.hidden = hidden_.ref(),
            .w13 = w13_.q.ref(),
            .w2 = w2_.q.ref(),
            .quant = {.mode = ScaleMode::kBlock,
                      .w13_scale = w13_.scales.ref(),
                      .w2_scale = w2_.scales.ref()},
            .topk_weights = weights_.ref(),
            .topk_ids = ids_.ref(),
            .out = out_.ref()};
  }

  // Experts with `edit` applied fails with `message`, and writes nothing.
  void ExpectRejected(const std::function<void(ExpertsArgs&)>& edit,
                      const std::string& message) {
    ExpertsArgs args = Args();
    edit(args);
    Workspace ws;
    EXPECT_THAT(Experts(SharedRuntime(), args, ws),
                StatusIs(kInvalid, message));
    for (int64_t i = 0; i < out_.numel(); ++i) {
      ASSERT_TRUE(std::isnan(out_.at(i))) << message;
    }
  }

  std::mt19937_64 rng_;
  Fp8Weights w13_, w2_;
  HostTensor hidden_, out_, weights_, ids_, scalar_;
};

TEST_F(Fp8ChecksTest, ModeAndBlockShape) {
  ExpectRejected([](ExpertsArgs& a) { a.quant.mode = ScaleMode{9}; },
                 "quant.mode: not a ScaleMode value: 9");
  ExpectRejected(
      [](ExpertsArgs& a) {
        a.quant.block_shape = {64, 128};
      },
      "quant.block_shape: only [128, 128] (the checkpoints' block) "
      "is supported, got [64, 128]");
  ExpectRejected(
      [](ExpertsArgs& a) {
        a.quant.mode = ScaleMode::kPerChannel;
        a.quant.block_shape = {128, 64};
      },
      "quant.block_shape: only used in block mode, leave it [128, 128]; got "
      "[128, 64]");
}

TEST_F(Fp8ChecksTest, Dtypes) {
  HostTensor bf16_w13(DType::kBF16, {kE, 2 * kI, kH});
  ExpectRejected([&](ExpertsArgs& a) { a.w13 = bf16_w13.ref(); },
                 "w13: dtype must be f8e4m3 with a scale mode, got bf16");
  HostTensor fp8_hidden(DType::kF8E4M3, {kT, kH});
  ExpectRejected([&](ExpertsArgs& a) { a.hidden = fp8_hidden.ref(); },
                 "hidden: dtype must be bf16 or f32, got f8e4m3");
  HostTensor bf16_scale(DType::kBF16, {kE, 2, 2});
  ExpectRejected([&](ExpertsArgs& a) { a.quant.w13_scale = bf16_scale.ref(); },
                 "quant.w13_scale: expected dtype f32, got bf16");
  // Without a scale mode, e4m3 weights are refused by the bf16 rules.
  ExpectRejected([](ExpertsArgs& a) { a.quant = {}; },
                 "w13: dtype must be bf16 or f32, got f8e4m3");
}

TEST_F(Fp8ChecksTest, ScaleShapes) {
  HostTensor short_n(DType::kF32, {kE, 1, 2});
  ExpectRejected([&](ExpertsArgs& a) { a.quant.w13_scale = short_n.ref(); },
                 "quant.w13_scale: dims[1] must equal N/128 = ceil(w13.dims[1] "
                 "/ 128) (2), got 1");
  HostTensor rank2(DType::kF32, {kE, 2});
  ExpectRejected([&](ExpertsArgs& a) { a.quant.w2_scale = rank2.ref(); },
                 "quant.w2_scale: expected rank 3, got 2 ([4, 2] f32 cpu)");
  HostTensor per_tensor(DType::kF32, {kE + 1});
  ExpectRejected(
      [&](ExpertsArgs& a) {
        a.quant.mode = ScaleMode::kPerTensor;
        a.quant.w13_scale = per_tensor.ref();
      },
      "quant.w13_scale: dims[0] must equal E = w13.dims[0] (4), got 5");
  HostTensor per_channel(DType::kF32, {kE, 100});
  ExpectRejected(
      [&](ExpertsArgs& a) {
        a.quant.mode = ScaleMode::kPerChannel;
        a.quant.w13_scale = per_channel.ref();
      },
      "quant.w13_scale: dims[1] must equal N = w13.dims[1] (256), got 100");
}

TEST_F(Fp8ChecksTest, BlockModeNeedsWholeKBlocks) {
  HostTensor hidden(DType::kBF16, {kT, 200}), out(DType::kBF16, {kT, 200});
  HostTensor w13(DType::kF8E4M3, {kE, 2 * kI, 200});
  ExpectRejected(
      [&](ExpertsArgs& a) {
        a.hidden = hidden.ref();
        a.w13 = w13.ref();
      },
      "w2: dims[1] must equal H = hidden.dims[1] (200), got 256");
  HostTensor w2(DType::kF8E4M3, {kE, 200, kI});
  ExpectRejected(
      [&](ExpertsArgs& a) {
        a.hidden = hidden.ref();
        a.w13 = w13.ref();
        a.w2 = w2.ref();
      },
      "hidden: dims[1] (H) must be a multiple of 128 in block mode, got 200");
}

TEST_F(Fp8ChecksTest, ActivationScales) {
  ExpectRejected([&](ExpertsArgs& a) { a.quant.a1_scale = scalar_.ref(); },
                 "quant.a1_scale: must be unset in block mode (activations are "
                 "quantized dynamically, 1 x 128 groups)");
  HostTensor w13_s(DType::kF32, {kE}), w2_s(DType::kF32, {kE});
  auto per_tensor = [&](ExpertsArgs& a) {
    a.quant.mode = ScaleMode::kPerTensor;
    a.quant.w13_scale = w13_s.ref();
    a.quant.w2_scale = w2_s.ref();
  };
  ExpectRejected(per_tensor,
                 "quant.a1_scale: required in per-tensor mode (the static "
                 "activation scale, [1] f32)");
  HostTensor two(DType::kF32, {2});
  ExpectRejected(
      [&](ExpertsArgs& a) {
        per_tensor(a);
        a.quant.a1_scale = scalar_.ref();
        a.quant.a2_scale = two.ref();
      },
      "quant.a2_scale: dims[0] must equal 1 (per tensor) (1), got 2");
}

TEST_F(Fp8ChecksTest, ScalesWithoutAModeAreRefused) {
  HostTensor w13(DType::kBF16, {kE, 2 * kI, kH}),
      w2(DType::kBF16, {kE, kH, kI});
  ExpectRejected(
      [&](ExpertsArgs& a) {
        a.w13 = w13.ref();
        a.w2 = w2.ref();
        a.quant.mode = ScaleMode::kNone;
      },
      "quant.w13_scale: must be unset without a scale mode (quant.mode), got "
      "[4, 2, 2] f32 cpu");
}

// GroupedGemm's own rules: K, the output, the activation and output scales.
TEST_F(Fp8ChecksTest, GroupedGemmRules) {
  HostTensor counts(DType::kI32, {kE});
  for (int e = 0; e < kE; ++e) counts.i32()[e] = e + 1;
  Workspace ws;
  TAILOR_ASSERT_OK(PlanRows(SharedRuntime(), {.counts = counts.ref()}, ws));
  const int64_t rows = ws.num_rows();
  HostTensor a(DType::kF8E4M3, {rows, kH}), a_scale(DType::kF32, {2, rows});
  HostTensor c(DType::kBF16, {rows, 2 * kI}), cq(DType::kF8E4M3, {rows, kI});
  HostTensor cq_scale(DType::kF32, {1, rows});
  const GroupedGemmArgs valid = {.a = a.ref(),
                                 .w = w13_.q.ref(),
                                 .c = c.ref(),
                                 .quant = {.mode = ScaleMode::kBlock,
                                           .a_scale = a_scale.ref(),
                                           .w_scale = w13_.scales.ref()}};
  auto expect = [&](const std::function<void(GroupedGemmArgs&)>& edit,
                    const std::string& message) {
    GroupedGemmArgs args = valid;
    edit(args);
    EXPECT_THAT(GroupedGemm(SharedRuntime(), args, ws),
                StatusIs(kInvalid, message));
  };
  HostTensor a200(DType::kF8E4M3, {rows, 200});
  HostTensor w200(DType::kF8E4M3, {kE, 2 * kI, 200});
  expect(
      [&](GroupedGemmArgs& g) {
        g.a = a200.ref();
        g.w = w200.ref();
      },
      "a: dims[1] (K) must be a multiple of 128 in block mode (a 1 x 128 "
      "group never straddles two weight blocks), got 200");
  HostTensor a_rows(DType::kF32, {2, rows - 1});
  expect([&](GroupedGemmArgs& g) { g.quant.a_scale = a_rows.ref(); },
         "quant.a_scale: dims[1] (scale rows) must be at least R = a.dims[0] "
         "(10), got 9");
  expect([&](GroupedGemmArgs& g) { g.quant.c_scale = cq_scale.ref(); },
         "quant.c_scale: must be unset unless c is f8e4m3, got [1, 10] f32 "
         "cpu");
  expect([&](GroupedGemmArgs& g) { g.c = cq.ref(); },
         "c: f8e4m3 (a quantized output) needs quant.mode kBlock and "
         "Epilogue::kSiluAndMul");
  expect(
      [&](GroupedGemmArgs& g) {
        g.c = cq.ref();
        g.epilogue = Epilogue::kSiluAndMul;
      },
      "quant.c_scale: required, f32 [1, S >= 10]");
  HostTensor bf16_a(DType::kBF16, {rows, kH});
  expect([&](GroupedGemmArgs& g) { g.a = bf16_a.ref(); },
         "a: dtype must be f8e4m3 with a scale mode, got bf16");
}

}  // namespace
}  // namespace tailor::moe::testing
