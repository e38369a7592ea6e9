// moe::Experts with FP8 (e4m3) weights on a CUDA sm_80+ device, end to end
// through the public entry: the device Route, the quantizing Pack, the
// gate|up GEMM quantizing its silu_and_mul output, the down GEMM and
// Combine, on a reserved device workspace; block mode, per-tensor mode
// (static activation scales) and per-channel mode (per-token activation
// scales: the gate|up GEMM writes bf16 rows into the workspace's hidden
// rows, a per-token Pack quantizes them; where they do not fit, H <= 2I, the
// exact error before anything is written); the per-token Pack bit for bit
// against the host quantizer. Against f64 on the dequantized inputs
// (ReferenceFp8Experts) over awkward per-expert counts
// (empty experts, 1, 127, 128, 129, 577, every token in one expert, T = 0),
// top-k routing at T in {1, 127, 128, 129, 577}, every tile the cost model
// picks, outputs NaN-poisoned first; steps of many T on one workspace
// encode no new descriptors; a captured CUDA graph replays with new data and
// token counts; the device's argument rules with their codes and messages.
// Both GEMM kernels (the parameter: tuning keys), and the generic kernels
// alone (background JIT with JIT disabled: zero compiles), as they serve
// either path's cold keys. Skips without a device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "ops/moe/cuda_test_util.h"
#include "ops/moe/fp8_test_util.h"
#include "ops/moe/kernels.h"

namespace tailor::moe::testing {
namespace {

using ::testing::HasSubstr;

// The bound of every check here, as the quantized tests elsewhere: the down
// projection reads e4m3 requantized from the f32 silu_and_mul; where the
// kernel's f32 and the reference's f64 round to either side of an e4m3
// boundary, that element moves a whole e4m3 step (1/16 to 1/8), and the bf16
// output adds its own rounding: together up to about 1e-2.
constexpr double kTolerance = 2e-2;

constexpr Fp8LayerDims kSmall = {8, 256, 128};  // two K blocks, one
constexpr Fp8LayerDims kWide = {16, 512, 256};  // two gate|up N tiles
// Per channel on a device needs H > 2I (the bf16 gate|up rows share the
// workspace's hidden rows): kNarrow, and kNarrowWide with two gate|up N
// tiles and H an odd multiple of 128; kSmall and kWide (H = 2I) fail.
constexpr Fp8LayerDims kNarrow = {8, 512, 128};
constexpr Fp8LayerDims kNarrowWide = {16, 640, 256};

const char* ModeFeature(ScaleMode mode) {
  return mode == ScaleMode::kBlock        ? "block"
         : mode == ScaleMode::kPerChannel ? "per_channel"
                                          : "per_tensor";
}

// bf16 activations: what Experts on a device takes.
Fp8Layer MakeLayer(std::mt19937_64& rng, const Fp8LayerDims& dims,
                   HostTensor ids, ScaleMode mode = ScaleMode::kBlock) {
  return MakeFp8Layer(rng, dims, std::move(ids), mode);
}

// A layer's device copies and the ExpertsArgs over them.
struct DeviceLayer {
  ScaleMode mode;
  DeviceTensor hidden, weights, ids, out, w13, w13_scale, w2, w2_scale, a1, a2;

  ExpertsArgs Args(RoutingPolicy policy = {}) const {
    ExpertsArgs args = {.hidden = hidden.ref(),
                        .w13 = w13.ref(),
                        .w2 = w2.ref(),
                        .quant = {.mode = mode,
                                  .w13_scale = w13_scale.ref(),
                                  .w2_scale = w2_scale.ref()},
                        .topk_weights = weights.ref(),
                        .topk_ids = ids.ref(),
                        .policy = policy,
                        .out = out.ref()};
    if (mode == ScaleMode::kPerTensor) {
      args.quant.a1_scale = a1.ref();
      args.quant.a2_scale = a2.ref();
    }
    return args;
  }
};

// Parameter: the kernels (cuda_test_util.h, Fp8KernelChoices).
class MoeFp8ExpertsCudaTest
    : public MoeCudaTest,
      public ::testing::WithParamInterface<KernelChoice> {
 protected:
  void SetUp() override { SetUpWith(GetParam()); }
  // The GEMM kernel the steps must have run.
  std::string ExpectedKernel() {
    if (GetParam().generic_only) return "cuda.generic_mma_fp8";
    const bool hopper =
        env_->backend().arch() == "sm_90a" && GetParam().tuning.empty();
    return hopper ? "cuda.sm90_tma_wgmma_fp8" : "cuda.sm80_mma_fp8";
  }

  DeviceLayer Upload(const Fp8Layer& l) {
    return {l.mode,
            ToDevice(l.hidden),
            ToDevice(l.weights),
            ToDevice(l.ids),
            ToDevice(l.out),
            ToDevice(l.w13.q),
            ToDevice(l.w13.scales),
            ToDevice(l.w2.q),
            ToDevice(l.w2.scales),
            ToDevice(l.a1),
            ToDevice(l.a2)};
  }

  WorkspaceLimits Limits(const Fp8Layer& l, RoutingPolicy policy = {}) {
    return {.max_tokens = l.hidden.ref().dims[0],
            .topk = l.ids.ref().dims[1],
            .num_experts = l.dims.experts,
            .hidden = l.dims.hidden,
            .intermediate = l.dims.intermediate,
            .dtype = DType::kBF16,
            .policy = policy};
  }

  // Runs `mode` with top-4 routing at T = 1, 17, 129 (every token on one
  // expert) and 577 on layers of `dims`.
  void CheckTokenCounts(std::mt19937_64& rng, const Fp8LayerDims& dims,
                        ScaleMode mode) {
    for (int64_t tokens : {1, 17, 129, 577}) {
      SCOPED_TRACE(absl::StrCat("T=", tokens, " H=", dims.hidden,
                                " I=", dims.intermediate));
      const Fp8Layer layer = MakeLayer(
          rng, dims,
          RandomTopkIds(rng, tokens, 4, dims.experts,
                        tokens == 129 ? Spread::kOneExpert : Spread::kUniform),
          mode);
      RunAndCheck(layer);
    }
  }

  // Captures one step of `mode` in a CUDA graph and replays it with new
  // data and token counts.
  void CheckGraphReplays(ScaleMode mode, const Fp8LayerDims& dims);

  // Runs the layer once on a fresh workspace and checks out against the
  // reference and the kernels that ran.
  void RunAndCheck(const Fp8Layer& layer, RoutingPolicy policy = {}) {
    DeviceLayer d = Upload(layer);
    Workspace ws;
    TAILOR_EXPECT_OK(ReserveWorkspace(runtime(), Limits(layer, policy), ws));
    TAILOR_EXPECT_OK(Experts(runtime(), d.Args(policy), ws));
    EXPECT_LT(RelativeError(d.out.Download(), layer.Reference()), kTolerance);
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
    if (GetParam().generic_only) {
      EXPECT_EQ(runtime().stats().compiles, 0u);
    }
    if (layer.hidden.ref().dims[0] > 0) {
      const std::vector<GemmChoice> gemms = ws.plan().gemms;
      EXPECT_EQ(gemms.size(), 2u) << ws.plan().ToString();
      for (const GemmChoice& g : gemms) {
        EXPECT_EQ(g.kernel.rfind(ExpectedKernel(), 0), 0u)
            << ws.plan().ToString();
        EXPECT_EQ(g.Feature("scale_mode").value_or(""),
                  ModeFeature(layer.mode));
      }
    }
  }
};

TEST_P(MoeFp8ExpertsCudaTest, AwkwardCountsMatchTheReference) {
  std::mt19937_64 rng(TestSeed());
  const std::vector<std::vector<int64_t>> grids = {
      {0, 1, 127, 128, 129, 0, 577, 17},  // empty experts, T-1, T, T+1
      {0, 0, 0, 200, 0, 0, 0, 0},         // every token in one expert
      {0, 0, 0, 0, 0, 0, 0, 0},           // T = 0
  };
  for (const std::vector<int64_t>& counts : grids) {
    const Fp8Layer layer = MakeLayer(rng, kSmall, IdsWithCounts(rng, counts));
    SCOPED_TRACE(absl::StrCat("counts ", counts[1], ",", counts[2], ",",
                              counts[3], " T=", layer.hidden.ref().dims[0]));
    RunAndCheck(layer);
  }
}

TEST_P(MoeFp8ExpertsCudaTest, TopKRoutingAtAwkwardTokenCounts) {
  std::mt19937_64 rng(TestSeed());
  for (int64_t tokens : {1, 127, 128, 129, 577}) {
    for (const Fp8LayerDims& dims : {kSmall, kWide}) {
      SCOPED_TRACE(absl::StrCat("T=", tokens, " E=", dims.experts,
                                " H=", dims.hidden, " I=", dims.intermediate));
      const Fp8Layer layer = MakeLayer(
          rng, dims,
          RandomTopkIds(rng, tokens, 4, dims.experts, Spread::kUniform));
      RunAndCheck(layer);
    }
  }
}

// Per tensor (vLLM's default FP8 checkpoints): Pack divides by a1, the
// gate|up epilogue by a2 (static scales), the scales multiply the
// accumulators; every tile kind the cost model picks, awkward counts.
TEST_P(MoeFp8ExpertsCudaTest, PerTensorModeMatchesTheReference) {
  std::mt19937_64 rng(TestSeed());
  CheckTokenCounts(rng, kWide, ScaleMode::kPerTensor);
  const Fp8Layer empty =
      MakeLayer(rng, kSmall, IdsWithCounts(rng, {0, 3, 0, 0, 128, 0, 1, 0}),
                ScaleMode::kPerTensor);
  RunAndCheck(empty);
}

// Per channel (vLLM's use_fp8_w8a8 with per-channel weight scales): the
// Pack quantizes each token by its row's amax, the gate|up GEMM writes bf16
// silu_and_mul rows, a per-token Pack quantizes them, the down GEMM scales
// by row and channel; the shapes whose hidden rows hold the bf16 rows
// (H > 2I); awkward counts, top-k routing, T = 0.
TEST_P(MoeFp8ExpertsCudaTest, PerChannelModeMatchesTheReference) {
  std::mt19937_64 rng(TestSeed());
  for (const Fp8LayerDims& dims : {kNarrow, kNarrowWide}) {
    CheckTokenCounts(rng, dims, ScaleMode::kPerChannel);
  }
  for (const std::vector<int64_t>& counts :
       {std::vector<int64_t>{0, 1, 127, 128, 129, 0, 577, 17},
        std::vector<int64_t>(8, 0)}) {
    SCOPED_TRACE(absl::StrCat("counts ", counts[1], ",", counts[2]));
    RunAndCheck(MakeLayer(rng, kNarrow, IdsWithCounts(rng, counts),
                          ScaleMode::kPerChannel));
  }
}

// Every tile class: the swap-AB decode tiles (8, 16, 32), 64 and 128 rows,
// with the tail policies that change the tail pieces.
TEST_P(MoeFp8ExpertsCudaTest, TileRowsAndTailPolicies) {
  std::mt19937_64 rng(TestSeed());
  for (int32_t tile_rows : {8, 16, 32, 64, 128}) {
    for (TailPolicy tail : {TailPolicy::kNextPowerOfTwo, TailPolicy::kExact}) {
      SCOPED_TRACE(absl::StrCat("tile_rows=", tile_rows,
                                " tail=", static_cast<int>(tail)));
      const Fp8Layer layer = MakeLayer(
          rng, kSmall, RandomTopkIds(rng, 129, 2, 8, Spread::kOneExpert));
      RunAndCheck(layer, {.tile_rows = tile_rows, .tail = tail});
    }
  }
}

// A server's steps on one workspace: the FP8 GEMMs' maps (A, W, A's
// scales) span the reserved rows, so only a tile class's first step
// encodes, and a second pass over the same steps encodes nothing.
TEST_P(MoeFp8ExpertsCudaTest, StepsOfEveryTEncodeNoNewDescriptors) {
  std::mt19937_64 rng(TestSeed());
  constexpr int64_t kTokens = 577, kTopk = 4;
  const Fp8Layer layer = MakeLayer(
      rng, kSmall, RandomTopkIds(rng, kTokens, kTopk, 8, Spread::kUniform));
  DeviceLayer d = Upload(layer);
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(layer), ws));
  auto encodes = [&] {
    return runtime().stats().backend_counters.at("cuda.descriptor_encodes");
  };
  uint64_t after_pass[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t t : {kTokens, int64_t{1}, int64_t{2}, int64_t{17}, int64_t{64},
                      int64_t{129}, int64_t{300}, kTokens - 1}) {
      SCOPED_TRACE(absl::StrCat("pass ", pass, ", T=", t));
      ExpertsArgs args = d.Args();
      for (TensorRef* view :
           {&args.hidden, &args.topk_weights, &args.topk_ids, &args.out}) {
        view->dims[0] = t;
      }
      const absl::Status status = Experts(runtime(), args, ws);
      TAILOR_ASSERT_OK(status);
      std::vector<double> ref = layer.Reference(t);
      ref.resize(static_cast<size_t>(t * kSmall.hidden));
      HostTensor out = d.out.Download();
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < t * kSmall.hidden; ++i) {
        ASSERT_FALSE(std::isnan(out.at(i))) << i;
        diff += (out.at(i) - ref[i]) * (out.at(i) - ref[i]);
        norm += ref[i] * ref[i];
      }
      EXPECT_LT(std::sqrt(diff / norm), kTolerance);
    }
    after_pass[pass] = encodes();
  }
  EXPECT_EQ(after_pass[1], after_pass[0]);
  TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
}

// One step captured in a CUDA graph replays with new data, routing and
// token counts (valid_tokens) in the captured buffers, compiling nothing.
TEST_P(MoeFp8ExpertsCudaTest, GraphReplaysEveryTokenCountOfItsBucket) {
  CheckGraphReplays(ScaleMode::kBlock, kSmall);
}

// The same with per-token scales: the extra Pack is captured too.
TEST_P(MoeFp8ExpertsCudaTest, PerChannelGraphReplaysEveryTokenCount) {
  CheckGraphReplays(ScaleMode::kPerChannel, kNarrow);
}

void MoeFp8ExpertsCudaTest::CheckGraphReplays(ScaleMode mode,
                                              const Fp8LayerDims& dims) {
  SCOPED_TRACE(absl::StrCat(ModeFeature(mode), " H=", dims.hidden,
                            " I=", dims.intermediate));
  std::mt19937_64 rng(TestSeed());
  constexpr int64_t kBucket = 64, kTopk = 2;
  cuda::testing::TestStream stream(api());
  ASSERT_TRUE(stream.ok());
  const Fp8Layer first = MakeLayer(
      rng, dims,
      RandomTopkIds(rng, kBucket, kTopk, dims.experts, Spread::kUniform), mode);
  DeviceLayer d = Upload(first);
  HostTensor count(DType::kI32, {1});
  count.i32()[0] = kBucket;
  DeviceTensor d_count = ToDevice(count);
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(first), ws));
  ExpertsArgs args = d.Args();
  args.valid_tokens = d_count.ref();
  args.stream = stream.get();
  // Once outside the capture: every kernel compiled, loaded, maps encoded.
  const absl::Status warm = Experts(runtime(), args, ws);
  TAILOR_ASSERT_OK(warm);
  TAILOR_ASSERT_OK(stream.Synchronize());

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuStreamBeginCapture(stream.get(),
                                       CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS);
  const absl::Status captured = Experts(runtime(), args, ws);
  ASSERT_EQ(api().cuStreamEndCapture(stream.get(), &graph), CUDA_SUCCESS);
  TAILOR_ASSERT_OK(captured);
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  const StatsSnapshot before = runtime().stats();
  for (int replay = 0; replay < 12; ++replay) {
    const int64_t tokens =
        std::uniform_int_distribution<int64_t>(0, kBucket)(rng);
    SCOPED_TRACE(absl::StrCat("replay ", replay, " T=", tokens));
    const Fp8Layer step = MakeLayer(
        rng, dims,
        RandomTopkIds(rng, kBucket, kTopk, dims.experts,
                      replay % 2 ? Spread::kUniform : Spread::kOneExpert),
        mode);
    d.hidden.Upload(step.hidden);
    d.ids.Upload(step.ids);
    d.weights.Upload(step.weights);
    d.w13.Upload(step.w13.q);
    d.w13_scale.Upload(step.w13.scales);
    d.w2.Upload(step.w2.q);
    d.w2_scale.Upload(step.w2.scales);
    d.out.Upload(step.out);  // NaN again
    count.i32()[0] = static_cast<int32_t>(tokens);
    d_count.Upload(count);
    ASSERT_EQ(api().cuGraphLaunch(exec, stream.get()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream.Synchronize());
    EXPECT_LT(RelativeError(d.out.Download(), step.Reference(tokens)),
              kTolerance);
    if (HasFailure()) break;
  }
  EXPECT_EQ(runtime().stats().compiles, before.compiles);
  api().cuGraphExecDestroy(exec);
  api().cuGraphDestroy(graph);
}

// ---- the per-token quantizing Pack, bit for bit -----------------------------

// Rows of a few binades (row t scaled by 2^(t % 7 - 3)) and an all-zero
// row, so per-token scales differ row to row and the epsilon rule runs.
HostTensor PerTokenRows(std::mt19937_64& rng, int64_t rows, int64_t h) {
  HostTensor x(DType::kBF16, {rows, h});
  x.FillRandom(rng, 2.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < h; ++c) {
      x.set(r * h + c, r == 3 ? 0.0 : std::ldexp(x.at(r * h + c), r % 7 - 3));
    }
  }
  return x;
}

// The Pack through the backend's launch (moe::Experts' only caller): rows
// gathered through a permutation with a -1 tail, or read in order (the
// down projection's input), against internal::Fp8Quantize with one block a
// row; bytes and scales bit for bit; rows past the tail untouched. H of one
// CTA stride, past it (17 groups), and a long row.
TEST_P(MoeFp8ExpertsCudaTest, PerTokenPackIsBitExact) {
  std::mt19937_64 rng(TestSeed());
  constexpr int64_t kTokens = 37, kTopk = 2, kTail = 5;
  constexpr int64_t kRows = kTokens * kTopk + kTail;
  absl::StatusOr<internal::MoeKernels*> kernels =
      internal::MoeKernelsOf(runtime(), "test");
  TAILOR_ASSERT_OK(kernels.status());
  HostTensor permutation(DType::kI32, {kRows});
  for (int64_t r = 0; r < kRows; ++r) {
    permutation.i32()[r] = r < kTokens * kTopk ? static_cast<int32_t>(r) : -1;
  }
  std::shuffle(permutation.i32(), permutation.i32() + kTokens * kTopk, rng);
  DeviceTensor d_permutation = ToDevice(permutation);
  for (const int64_t h : {int64_t{128}, int64_t{2176}, int64_t{4096}}) {
    for (const bool in_order : {false, true}) {
      SCOPED_TRACE(absl::StrCat("H=", h, in_order ? " in order" : " gathered"));
      const HostTensor x = PerTokenRows(rng, in_order ? kRows : kTokens, h);
      HostTensor a(DType::kF8E4M3, {kRows, h});
      std::memset(const_cast<void*>(a.ref().data), 0xab, kRows * h);
      HostTensor scales(DType::kF32, {kRows});
      scales.Poison();
      DeviceTensor d_x = ToDevice(x), d_a = ToDevice(a),
                   d_scales = ToDevice(scales);
      TAILOR_ASSERT_OK(
          (*kernels)->Pack(internal::EngineOf(runtime()),
                           {.dtype = DType::kBF16,
                            .hidden_dim = h,
                            .rows = kRows,
                            .tokens = kTokens,
                            .topk = kTopk,
                            .hidden = d_x.ref().data,
                            .permutation = d_permutation.ref().as<int32_t>(),
                            .a = d_a.ref().data,
                            .scale_mode = ScaleMode::kPerChannel,
                            .a_scales = d_scales.ref().as<float>(),
                            .scale_rows = kRows,
                            .rows_in_order = in_order}));
      const HostTensor got = d_a.Download(), got_scales = d_scales.Download();
      const auto* got_bytes = static_cast<const uint8_t*>(got.ref().data);
      std::vector<uint8_t> want(static_cast<size_t>(h));
      for (int64_t r = 0; r < kRows; ++r) {
        const int32_t entry = permutation.i32()[r];
        if (entry < 0) {  // untouched
          EXPECT_TRUE(std::isnan(got_scales.at(r))) << r;
          EXPECT_EQ(got_bytes[r * h], 0xab) << r;
          EXPECT_EQ(got_bytes[r * h + h - 1], 0xab) << r;
          continue;
        }
        const int64_t source = in_order ? r : entry / kTopk;
        const auto* row =
            static_cast<const uint16_t*>(x.ref().data) + source * h;
        float want_scale = 0;
        TAILOR_ASSERT_OK(internal::Fp8Quantize(
            TensorRef::Contiguous(row, DType::kBF16, {1, h}), {1, h},
            want.data(), {&want_scale, 0, 0}));
        EXPECT_EQ(static_cast<float>(got_scales.at(r)), want_scale) << r;
        EXPECT_EQ(std::memcmp(got_bytes + r * h, want.data(), h), 0) << r;
        if (HasFailure()) return;
      }
    }
  }
  if (GetParam().generic_only) {
    EXPECT_EQ(runtime().stats().compiles, 0u);
  }
}

// ---- argument rules of a device step ----------------------------------------

TEST_P(MoeFp8ExpertsCudaTest, DeviceRulesNameTheArgument) {
  std::mt19937_64 rng(TestSeed());
  const Fp8Layer layer =
      MakeLayer(rng, kSmall, RandomTopkIds(rng, 17, 2, 8, Spread::kUniform));
  DeviceLayer d = Upload(layer);
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(layer), ws));
  const absl::Status probe = Experts(runtime(), d.Args(), ws);
  TAILOR_ASSERT_OK(probe);

  // f32 activations: the quantizing Pack reads bf16.
  HostTensor hidden_f32(DType::kF32, {17, kSmall.hidden});
  DeviceTensor d_f32 = ToDevice(hidden_f32);
  HostTensor out_f32(DType::kF32, {17, kSmall.hidden});
  DeviceTensor d_out_f32 = ToDevice(out_f32);
  ExpertsArgs args = d.Args();
  args.hidden = d_f32.ref();
  args.out = d_out_f32.ref();
  EXPECT_THAT(Experts(runtime(), args, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "hidden: FP8 Experts on a device takes bf16 "
                       "activations (the quantizing Pack reads bf16), got "
                       "f32"));

  // e4m3 weights 8 bytes past a 16-byte boundary: TMA boxes start on 16.
  args = d.Args();
  args.w2.data = static_cast<unsigned char*>(args.w2.data) + 8;
  EXPECT_THAT(Experts(runtime(), args, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w2: data must be 16-byte aligned on ")));

  // A workspace reserved for a smaller intermediate size.
  Workspace small;
  WorkspaceLimits limits = Limits(layer);
  limits.intermediate = kSmall.intermediate / 2;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), limits, small));
  EXPECT_THAT(Experts(runtime(), d.Args(), small),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("ws: reserved for intermediate row bytes")));

  // A workspace never reserved.
  Workspace none;
  EXPECT_EQ(Experts(runtime(), d.Args(), none).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Per channel where the hidden rows cannot hold the bf16 gate|up rows
// (H = 2I here; Mixtral-8x7B's H < 2I likewise): FailedPrecondition naming
// the rule and the numbers, before Route: the workspace stays unrouted, out
// keeps its NaN poison, nothing compiles. Block mode runs the same shape.
TEST_P(MoeFp8ExpertsCudaTest, PerChannelWithoutRoomFailsBeforeRouting) {
  std::mt19937_64 rng(TestSeed());
  const Fp8Layer layer =
      MakeLayer(rng, kSmall, RandomTopkIds(rng, 17, 2, 8, Spread::kUniform),
                ScaleMode::kPerChannel);
  DeviceLayer d = Upload(layer);
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(layer), ws));
  const StatsSnapshot before = runtime().stats();
  // A = 17 * 2 reserved rows, S = 36: 34 * 256 + 4 * 36 + 2 * 34 * 128
  // bytes against 34 * 256 * 2.
  EXPECT_THAT(Experts(runtime(), d.Args(), ws),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "quant.mode: per-channel FP8 Experts on a device keeps "
                       "its bf16 gate|up rows in the workspace's hidden rows "
                       "after the e4m3 input, which needs H > 2 * I on a "
                       "workspace reserved for this H (A * H + 4 * S + 2 * A "
                       "* I <= the hidden rows' bytes); got H=256, I=128, "
                       "A=34, S=36: 17552 > 17408 bytes (block and per-tensor "
                       "mode run this shape)"));
  EXPECT_FALSE(ws.routed());
  EXPECT_EQ(runtime().stats().compiles, before.compiles);
  const HostTensor out = d.out.Download();
  for (int64_t i = 0; i < 17 * kSmall.hidden; ++i) {
    ASSERT_TRUE(std::isnan(out.at(i))) << i;
  }
  const Fp8Layer block =
      MakeLayer(rng, kSmall, RandomTopkIds(rng, 17, 2, 8, Spread::kUniform));
  RunAndCheck(block);
}

INSTANTIATE_TEST_SUITE_P(Kernels, MoeFp8ExpertsCudaTest,
                         ::testing::ValuesIn(Fp8KernelChoices()),
                         KernelChoiceName);

}  // namespace
}  // namespace tailor::moe::testing
