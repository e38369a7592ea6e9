// HIP runtime tests: need an AMD Instinct GPU (gfx90a / gfx94x) and ROCm.
// Every test skips with a message where there is none (CI, this machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "backends/hip/hip_backend.h"
#include "backends/hip/moe/kernels.h"
#include "ops/attention/ragged_host_test_util.h"
#include "ops/moe/moe_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/status.h"
#include "templates/hip/moe/params.h"
#include "test_util.h"

namespace tailor::hip {
namespace {

using tailor::internal::Kernel;
using tailor::internal::KernelSource;
using tailor::internal::LaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;

// The device backend, or a skip naming why there is none.
#define TAILOR_HIP_BACKEND_OR_SKIP(var)                                 \
  absl::StatusOr<std::unique_ptr<HipBackend>> var##_or =                \
      HipBackend::Create({});                                           \
  if (!var##_or.ok()) {                                                 \
    ASSERT_EQ(var##_or.status().code(), absl::StatusCode::kUnavailable) \
        << var##_or.status();                                           \
    GTEST_SKIP() << "no AMD GPU here: " << var##_or.status();           \
  }                                                                     \
  HipBackend& var = **var##_or

// Pack gathers rows by the permutation: compile, load, launch, read back.
TEST(HipGpuTest, PackGathersRowsOnTheDevice) {
  TAILOR_HIP_BACKEND_OR_SKIP(backend);
  constexpr int kTokens = 3, kH = 64;
  SpecKey key;
  key.op = OpKind::kMoePack;
  key.backend = BackendKind::kHip;
  key.SetArch(backend.arch());
  key.dtypes = {DType::kF32};
  key.dims = {kH};
  absl::StatusOr<KernelSource> source = GenerateHipMoeKernel(key);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::string> binary = backend.Compile(key, *source);
  ASSERT_TRUE(binary.ok()) << binary.status();
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      backend.Load(key, *source, *binary);
  ASSERT_TRUE(kernel.ok()) << kernel.status();

  std::vector<float> hidden(kTokens * kH);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = static_cast<float>(i);
  const std::vector<int> permutation = {2, 0, 1};  // topk 1
  auto d_hidden = backend.AllocateDevice(hidden.size() * 4);
  auto d_perm = backend.AllocateDevice(permutation.size() * 4);
  auto d_a = backend.AllocateDevice(hidden.size() * 4);
  ASSERT_TRUE(d_hidden.ok() && d_perm.ok() && d_a.ok());
  TAILOR_ASSERT_OK(backend.CopyToDevice(d_hidden->get(), hidden.data(),
                                        hidden.size() * 4, nullptr));
  TAILOR_ASSERT_OK(backend.CopyToDevice(d_perm->get(), permutation.data(),
                                        permutation.size() * 4, nullptr));
  tailor::gpu::MoePackParams p = {
      .hidden = d_hidden->get(),
      .permutation = static_cast<const int*>(d_perm->get()),
      .a = d_a->get(),
      .rows = kTokens,
      .tokens = kTokens,
      .topk = 1};
  LaunchConfig config;
  config.grid = {.x = kTokens, .y = 1};
  config.block = {.x = tailor::gpu::kMoePackThreads};
  TAILOR_ASSERT_OK(backend.Launch(**kernel, config, &p, sizeof(p)));
  std::vector<float> a(hidden.size());
  TAILOR_ASSERT_OK(
      backend.CopyToHost(a.data(), d_a->get(), a.size() * 4, nullptr));
  for (int r = 0; r < kTokens; ++r) {
    EXPECT_EQ(std::memcmp(&a[r * kH], &hidden[permutation[r] * kH], kH * 4), 0)
        << "row " << r;
  }
}

// A device copy of a host tensor (hipMalloc'd through the backend's
// loader), with a view that says "hip:0".
class HipTensor {
 public:
  HipTensor(const HipRuntimeApi& api, const moe::testing::HostTensor& host)
      : api_(api), host_(host), bytes_(host.numel() * DTypeSize(host.dtype())) {
    EXPECT_EQ(api_.Malloc(&data_, bytes_ == 0 ? 1 : bytes_), hipSuccess);
    EXPECT_EQ(api_.MemcpyAsync(data_, host.ref().data, bytes_,
                               hipMemcpyHostToDevice, nullptr),
              hipSuccess);
    EXPECT_EQ(api_.StreamSynchronize(nullptr), hipSuccess);
  }
  ~HipTensor() { (void)api_.Free(data_); }
  TensorRef ref() const {
    TensorRef t = host_.ref();
    t.data = data_;
    t.device = {.type = DeviceType::kHip, .index = 0};
    return t;
  }
  moe::testing::HostTensor Download() const {
    moe::testing::HostTensor out = host_;
    EXPECT_EQ(api_.MemcpyAsync(const_cast<void*>(out.ref().data), data_, bytes_,
                               hipMemcpyDeviceToHost, nullptr),
              hipSuccess);
    EXPECT_EQ(api_.StreamSynchronize(nullptr), hipSuccess);
    return out;
  }

 private:
  const HipRuntimeApi& api_;
  moe::testing::HostTensor host_;
  size_t bytes_;
  void* data_ = nullptr;
};

// moe::Experts on a HIP runtime (route, pack, MFMA or SIMT GEMMs, combine)
// against the fp64 reference, for bf16 (MFMA) and f32 (SIMT), with tails.
TEST(HipGpuTest, ExpertsMatchTheReference) {
  TAILOR_HIP_BACKEND_OR_SKIP(backend);
  (void)backend;
  Runtime::Options options;
  options.backend = BackendKind::kHip;
  options.log_level = "error";
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  const HipRuntimeApi& api = **LoadHipRuntimeApi();
  using moe::testing::HostTensor;
  using moe::testing::kHidden;
  using moe::testing::kIntermediate;
  std::mt19937_64 rng(13);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    constexpr int64_t kTokens = 37, kTopk = 2, kExperts = 8;
    SCOPED_TRACE(DTypeName(dtype));
    HostTensor hidden(dtype, {kTokens, kHidden});
    HostTensor w13(dtype, {kExperts, 2 * kIntermediate, kHidden});
    HostTensor w2(dtype, {kExperts, kHidden, kIntermediate});
    HostTensor weights(DType::kF32, {kTokens, kTopk});
    HostTensor ids = moe::testing::RandomTopkIds(
        rng, kTokens, kTopk, kExperts, moe::testing::Spread::kUniform);
    HostTensor out(dtype, {kTokens, kHidden});
    hidden.FillRandom(rng);
    w13.FillRandom(rng, 0.25);
    w2.FillRandom(rng, 0.25);
    weights.FillRandom(rng);
    HipTensor d_hidden(api, hidden), d_w13(api, w13), d_w2(api, w2),
        d_weights(api, weights), d_ids(api, ids), d_out(api, out);
    moe::Workspace ws;
    TAILOR_ASSERT_OK(moe::ReserveWorkspace(**runtime,
                                           {.max_tokens = kTokens,
                                            .topk = kTopk,
                                            .num_experts = kExperts,
                                            .hidden = kHidden,
                                            .intermediate = kIntermediate,
                                            .dtype = dtype},
                                           ws));
    TAILOR_ASSERT_OK(moe::Experts(**runtime,
                                  {.hidden = d_hidden.ref(),
                                   .w13 = d_w13.ref(),
                                   .w2 = d_w2.ref(),
                                   .topk_weights = d_weights.ref(),
                                   .topk_ids = d_ids.ref(),
                                   .out = d_out.ref()},
                                  ws));
    const std::vector<double> reference = moe::testing::ReferenceExperts(
        {hidden, w13, w2, weights, ids, nullptr}, kTokens, kTopk);
    EXPECT_LT(moe::testing::RelativeError(d_out.Download(), reference),
              moe::testing::Tolerance(dtype));
  }
}

// Device bytes uploaded from a host buffer (hipMalloc'd through the
// backend's loader), downloaded back on request.
class HipBytes {
 public:
  HipBytes(const HipRuntimeApi& api, const void* host, size_t bytes)
      : api_(api), bytes_(bytes) {
    EXPECT_EQ(api_.Malloc(&data_, bytes_ == 0 ? 1 : bytes_), hipSuccess);
    EXPECT_EQ(
        api_.MemcpyAsync(data_, host, bytes_, hipMemcpyHostToDevice, nullptr),
        hipSuccess);
    EXPECT_EQ(api_.StreamSynchronize(nullptr), hipSuccess);
  }
  ~HipBytes() { (void)api_.Free(data_); }
  void* data() const { return data_; }
  void Download(void* host) const {
    EXPECT_EQ(
        api_.MemcpyAsync(host, data_, bytes_, hipMemcpyDeviceToHost, nullptr),
        hipSuccess);
    EXPECT_EQ(api_.StreamSynchronize(nullptr), hipSuccess);
  }

 private:
  const HipRuntimeApi& api_;
  size_t bytes_;
  void* data_ = nullptr;
};

// A view of `t` on device memory `data`.
TensorRef OnHip(TensorRef t, void* data) {
  t.data = data;
  t.device = {.type = DeviceType::kHip, .index = 0};
  return t;
}

// A HIP runtime for the attention tests, or a failure.
std::unique_ptr<Runtime> HipRuntime() {
  Runtime::Options options;
  options.backend = BackendKind::kHip;
  options.log_level = "error";
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? *std::move(runtime) : nullptr;
}

// One ragged step of `c` on a HIP runtime: the batch uploaded (NaN in
// unowned cache pages, poisoned outputs), reserved, planned and run, with
// `device_kv_lens` ([B] i32 on the device, when given) as
// RunRaggedArgs::kv_lens.
class HipRaggedStep {
 public:
  HipRaggedStep(Runtime& runtime, const HipRuntimeApi& api,
                const attention::testing::RaggedCase& c)
      : runtime_(runtime),
        c_(c),
        p_(attention::testing::BuildRaggedBatch(c)),
        o_(attention::testing::PoisonedOutputs(p_)),
        q_(api, p_.q.data(), p_.q.size() * 2),
        k_(api, p_.k.data(), p_.k.size() * 2),
        v_(api, p_.v.data(), p_.v.size() * 2),
        table_(api, p_.block_table.data(), p_.block_table.size() * 4),
        out_(api, o_.out.data(), o_.out.size() * 2),
        lse_(api, o_.lse.data(), o_.lse.size() * 4) {}

  absl::Status Run(const HipBytes* device_kv_lens = nullptr) {
    attention::RunRaggedArgs args = attention::testing::RunArgsOf(p_, o_);
    args.q = OnHip(args.q, q_.data());
    args.k_cache = OnHip(args.k_cache, k_.data());
    args.v_cache = OnHip(args.v_cache, v_.data());
    args.block_table = OnHip(args.block_table, table_.data());
    args.out = OnHip(args.out, out_.data());
    args.lse = OnHip(*args.lse, lse_.data());
    args.kv_lens = std::nullopt;  // the plan's lengths
    if (device_kv_lens != nullptr) {
      args.kv_lens = OnHip(
          TensorRef::Contiguous(nullptr, DType::kI32, {c_.batch()}),
          device_kv_lens->data());
    }
    TAILOR_RETURN_IF_ERROR(attention::ReserveRaggedWorkspace(
        runtime_, attention::testing::LimitsOf(c_), ws_));
    TAILOR_RETURN_IF_ERROR(attention::PlanRagged(
        runtime_, attention::testing::PlanArgsOf(p_), ws_));
    return attention::RunRagged(runtime_, args, ws_);
  }

  attention::RaggedWorkspace& ws() { return ws_; }

  // The outputs against the fp64 reference.
  void ExpectMatchesTheReference() {
    out_.Download(o_.out.data());
    lse_.Download(o_.lse.data());
    const attention::testing::Errors err = attention::testing::CompareRagged(
        p_,
        attention::testing::RaggedReference(
            p_, 1.0 / std::sqrt(static_cast<double>(c_.head_dim))),
        o_.out, &o_.lse);
    EXPECT_LE(err.out_rel, 1e-2) << err.worst << " | " << ws_.plan().ToString();
    EXPECT_LE(err.lse_abs, 2e-2);
  }

 private:
  Runtime& runtime_;
  attention::testing::RaggedCase c_;
  attention::testing::RaggedBatch p_;
  attention::testing::Outputs o_;
  HipBytes q_, k_, v_, table_, out_, lse_;
  attention::RaggedWorkspace ws_;
};

// A mixed step: prefill chunks over prefixes, decode and speculative rows,
// an empty sequence, a split long sequence.
attention::testing::RaggedCase MixedStep() {
  return {.q_lens = {200, 1, 1, 4, 0, 31, 65, 577, 17, 64},
          .kv_lens = {700, 1000, 33, 260, 9, 31, 100, 577, 4000, 20000},
          .num_qo_heads = 8,
          .num_kv_heads = 2,
          .head_dim = 128,
          .shared_prefix_pages = 2,
          .padding_rows = 5,
          .seed = 21};
}

// attention::RunRagged on a HIP runtime (the SIMT ragged kernel and its
// merge) against the fp64 reference: the mixed step, NaN in unowned cache
// pages and poisoned outputs; bf16 and f16, head dims 64 / 128 / 256, pages
// of 1, 3 and 16, window and soft cap.
TEST(HipGpuTest, RaggedAttentionMatchesTheReference) {
  TAILOR_HIP_BACKEND_OR_SKIP(backend);
  (void)backend;
  const std::unique_ptr<Runtime> runtime = HipRuntime();
  ASSERT_NE(runtime, nullptr);
  const HipRuntimeApi& api = **LoadHipRuntimeApi();
  std::vector<attention::testing::RaggedCase> cases(3, MixedStep());
  cases[1].dtype = DType::kF16;
  cases[1].head_dim = 64;
  cases[1].page_size = 3;
  cases[1].window_left = 100;
  cases[2].head_dim = 256;
  cases[2].page_size = 1;
  cases[2].num_qo_heads = 16;
  cases[2].soft_cap = 30.0f;
  cases[2].causal = false;
  for (const attention::testing::RaggedCase& c : cases) {
    SCOPED_TRACE(c.ToString().substr(0, 90));
    HipRaggedStep step(*runtime, api, c);
    TAILOR_ASSERT_OK(step.Run());
    TAILOR_ASSERT_OK(step.ws().TakeErrors(*runtime, nullptr));
    step.ExpectMatchesTheReference();
  }
}

// Device KV lengths (RunRaggedArgs::kv_lens) that differ from the plan:
// TakeErrors reports the lowest with the host check's text, then nothing;
// the tiles attend the planned length, so the step still matches the
// reference. Equal lengths report nothing.
TEST(HipGpuTest, RaggedDeviceKvLengthsThatDifferAreReported) {
  TAILOR_HIP_BACKEND_OR_SKIP(backend);
  (void)backend;
  const std::unique_ptr<Runtime> runtime = HipRuntime();
  ASSERT_NE(runtime, nullptr);
  const HipRuntimeApi& api = **LoadHipRuntimeApi();
  const attention::testing::RaggedCase c = MixedStep();
  for (const auto& [seq, delta] : {std::pair<int, int32_t>{0, 0},
                                   {0, 1}, {7, -2}, {9, 5}}) {
    SCOPED_TRACE(::testing::Message() << "seq " << seq << " delta " << delta);
    std::vector<int32_t> device_lens = c.kv_lens;
    device_lens[seq] += delta;
    const HipBytes lens(api, device_lens.data(), device_lens.size() * 4);
    HipRaggedStep step(*runtime, api, c);
    TAILOR_ASSERT_OK(step.Run(&lens));
    if (delta == 0) {
      TAILOR_EXPECT_OK(step.ws().TakeErrors(*runtime, nullptr));
    } else {
      EXPECT_THAT(step.ws().TakeErrors(*runtime, nullptr),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           absl::StrCat("kv_lens[", seq, "]: ",
                                        device_lens[seq], " differs from ",
                                        c.kv_lens[seq],
                                        ", the length PlanRagged planned")));
      TAILOR_EXPECT_OK(step.ws().TakeErrors(*runtime, nullptr));  // cleared
    }
    step.ExpectMatchesTheReference();
  }
}

}  // namespace
}  // namespace tailor::hip
