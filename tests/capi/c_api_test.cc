// Tests of the C ABI (tailor/c_api.h), linked against libtailor_c.so as a C
// program would be: every entry's argument checks with exact codes and
// messages, the thread-local error text, and results bit-identical to the
// C++ API's.
#include "tailor/c_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kT = 7, kH = 64, kI = 32, kE = 4, kK = 2;

std::string LastError() { return tailor_last_error(); }

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tailor_runtime_options options = {};
    options.backend = TAILOR_BACKEND_CPU;
    options.log_level = "error";
    options.cache_dir = TAILOR_CAPI_TEST_CACHE_DIR;
    ASSERT_EQ(tailor_runtime_create(&options, &runtime_), TAILOR_STATUS_OK)
        << LastError();
    ASSERT_EQ(tailor_moe_workspace_create(&ws_), TAILOR_STATUS_OK);
  }
  void TearDown() override {
    tailor_moe_workspace_destroy(ws_);
    tailor_runtime_destroy(runtime_);
  }

  // f32 inputs of one Experts call, routed round-robin.
  void FillInputs() {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (auto* v : {&hidden_, &w13_, &w2_}) {
      for (float& x : *v) x = dist(rng);
    }
    for (int64_t t = 0; t < kT; ++t) {
      ids_[t * kK] = static_cast<int32_t>(t % kE);
      ids_[t * kK + 1] = static_cast<int32_t>((t + 1) % kE);
      weights_[t * kK] = 0.6f;
      weights_[t * kK + 1] = 0.4f;
    }
  }

  tailor_moe_experts_args ExpertsArgs() {
    tailor_moe_experts_args args = {};
    args.hidden = tailor_tensor_contiguous(hidden_.data(), TAILOR_DTYPE_F32, 2,
                                           hidden_dims_);
    args.w13 =
        tailor_tensor_contiguous(w13_.data(), TAILOR_DTYPE_F32, 3, w13_dims_);
    args.w2 =
        tailor_tensor_contiguous(w2_.data(), TAILOR_DTYPE_F32, 3, w2_dims_);
    args.topk_weights = tailor_tensor_contiguous(
        weights_.data(), TAILOR_DTYPE_F32, 2, topk_dims_);
    args.topk_ids =
        tailor_tensor_contiguous(ids_.data(), TAILOR_DTYPE_I32, 2, topk_dims_);
    args.out = tailor_tensor_contiguous(out_.data(), TAILOR_DTYPE_F32, 2,
                                        hidden_dims_);
    return args;
  }

  tailor_runtime* runtime_ = nullptr;
  tailor_moe_workspace* ws_ = nullptr;
  const int64_t hidden_dims_[2] = {kT, kH}, w13_dims_[3] = {kE, 2 * kI, kH},
                w2_dims_[3] = {kE, kH, kI}, topk_dims_[2] = {kT, kK};
  std::vector<float> hidden_ = std::vector<float>(kT * kH),
                     w13_ = std::vector<float>(kE * 2 * kI * kH),
                     w2_ = std::vector<float>(kE * kH * kI),
                     weights_ = std::vector<float>(kT * kK),
                     out_ = std::vector<float>(kT * kH);
  std::vector<int32_t> ids_ = std::vector<int32_t>(kT * kK);
};

TEST(CApi, VersionsAndStatusNames) {
  EXPECT_EQ(tailor_c_api_version(), uint32_t{TAILOR_C_API_VERSION});
  EXPECT_STREQ(tailor_version(), "0.1.0");
  EXPECT_STREQ(tailor_status_name(TAILOR_STATUS_OK), "OK");
  EXPECT_STREQ(tailor_status_name(TAILOR_STATUS_FAILED_PRECONDITION),
               "FAILED_PRECONDITION");
  EXPECT_STREQ(tailor_status_name(TAILOR_STATUS_UNAUTHENTICATED),
               "UNAUTHENTICATED");
  EXPECT_STREQ(tailor_status_name(17), "UNKNOWN_CODE");
  EXPECT_STREQ(tailor_status_name(-1), "UNKNOWN_CODE");
}

// Regression (c_api_fuzz under UBSan): dims whose product overflows int64
// made tailor_tensor_contiguous's stride computation overflow (undefined
// behavior). It saturates, and an op rejects the view.
TEST(CApi, TensorContiguousSaturatesStridesPastInt64) {
  const int64_t dims[2] = {65535, int64_t{1} << 62};
  tailor_tensor t =
      tailor_tensor_contiguous(nullptr, TAILOR_DTYPE_I32, 2, dims);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.strides[0], int64_t{1} << 62);
  const int64_t three[3] = {2, int64_t{1} << 40, int64_t{1} << 40};
  t = tailor_tensor_contiguous(nullptr, TAILOR_DTYPE_I32, 3, three);
  EXPECT_EQ(t.strides[0], INT64_MAX);
  int32_t ids[1] = {0};
  t.data = ids;
  tailor_runtime_options options = {};
  options.backend = TAILOR_BACKEND_CPU;
  options.log_level = "error";
  options.disable_disk_cache = 1;
  tailor_runtime* runtime = nullptr;
  ASSERT_EQ(tailor_runtime_create(&options, &runtime), TAILOR_STATUS_OK);
  tailor_moe_workspace* ws = nullptr;
  ASSERT_EQ(tailor_moe_workspace_create(&ws), TAILOR_STATUS_OK);
  tailor_moe_route_args route = {};
  t.rank = 2;  // [2, 2^62]: 2^63 elements do not fit int64
  t.dims[1] = int64_t{1} << 62;
  t.strides[0] = INT64_MAX;
  route.topk_ids = t;
  route.num_experts = 4;
  EXPECT_EQ(tailor_moe_route(runtime, &route, ws),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("topk_ids"));
  tailor_moe_workspace_destroy(ws);
  tailor_runtime_destroy(runtime);
}

// Regression: misaligned topk_ids were read as int32_t by moe::Route (UBSan:
// load of misaligned address); now InvalidArgument before anything reads.
TEST_F(CApiTest, MisalignedIndexTensorsAreRejected) {
  alignas(8) unsigned char bytes[4 * kT * kK + 8] = {};
  tailor_moe_route_args route = {};
  route.topk_ids =
      tailor_tensor_contiguous(bytes + 1, TAILOR_DTYPE_I32, 2, topk_dims_);
  route.num_experts = kE;
  EXPECT_EQ(tailor_moe_route(runtime_, &route, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), StartsWith("topk_ids: data must be aligned to its "
                                      "element size (4 bytes for i32)"));
}

TEST(CApi, RuntimeCreateRejectsBadArguments) {
  EXPECT_EQ(tailor_runtime_create(nullptr, nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "out: must not be null");

  tailor_runtime_options options = {};
  options.backend = 9;
  tailor_runtime* runtime = reinterpret_cast<tailor_runtime*>(0x1);
  EXPECT_EQ(tailor_runtime_create(&options, &runtime),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "options.backend: not a tailor_backend value (0..3), got 9");
  EXPECT_EQ(runtime, nullptr);

  options = {};
  options.memory_cache_capacity = -1;
  EXPECT_EQ(tailor_runtime_create(&options, &runtime),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), StartsWith("options.memory_cache_capacity: must be "
                                      ">= 0"));

  options = {};
  options.jit_mode = 7;
  EXPECT_EQ(tailor_runtime_create(&options, &runtime),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "options.jit_mode: not a tailor_jit_mode value (0..2), got 7");
  options.jit_mode = -1;
  EXPECT_EQ(tailor_runtime_create(&options, &runtime),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "options.jit_mode: not a tailor_jit_mode value (0..2), got -1");
  EXPECT_EQ(runtime, nullptr);
}

TEST(CApi, NullHandlesAreInvalidArgumentNotCrashes) {
  tailor_runtime_info info;
  EXPECT_EQ(tailor_runtime_get_info(nullptr, &info),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "runtime: must not be null");
  char* text = nullptr;
  EXPECT_EQ(tailor_runtime_stats(nullptr, TAILOR_STATS_JSON, &text),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(tailor_moe_experts(nullptr, nullptr, nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "runtime: must not be null");
  EXPECT_EQ(tailor_moe_workspace_create(nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  tailor_runtime_destroy(nullptr);  // no-ops
  tailor_moe_workspace_destroy(nullptr);
  tailor_string_free(nullptr);
}

TEST_F(CApiTest, InfoAndStats) {
  tailor_runtime_info info;
  ASSERT_EQ(tailor_runtime_get_info(runtime_, &info), TAILOR_STATUS_OK);
  EXPECT_EQ(info.backend, TAILOR_BACKEND_CPU);
  EXPECT_EQ(info.device_type, TAILOR_DEVICE_CPU);
  EXPECT_THAT(info.arch, StartsWith("x86_64"));
  EXPECT_STREQ(info.cache_dir, TAILOR_CAPI_TEST_CACHE_DIR);
  EXPECT_STREQ(info.stats_address, "");

  char* text = nullptr;
  ASSERT_EQ(tailor_runtime_stats(runtime_, TAILOR_STATS_JSON, &text),
            TAILOR_STATUS_OK);
  EXPECT_THAT(text, HasSubstr("\"lookups\""));
  tailor_string_free(text);
  ASSERT_EQ(tailor_runtime_stats(runtime_, TAILOR_STATS_PROMETHEUS, &text),
            TAILOR_STATUS_OK);
  EXPECT_THAT(text, HasSubstr("# TYPE tailor_kernel_lookups_total counter"));
  tailor_string_free(text);
  EXPECT_EQ(tailor_runtime_stats(runtime_, 2, &text),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "format: not a tailor_stats_format value (0..1), got 2");
  EXPECT_EQ(text, nullptr);
}

TEST_F(CApiTest, ExpertsMatchesRouteThenStepByStep) {
  FillInputs();
  tailor_moe_experts_args args = ExpertsArgs();
  ASSERT_EQ(tailor_moe_experts(runtime_, &args, ws_), TAILOR_STATUS_OK)
      << LastError();
  EXPECT_EQ(LastError(), "");
  const std::vector<float> fused = out_;

  // The same layer step by step: Route, Pack, two GroupedGemms, Combine.
  tailor_moe_route_args route = {};
  route.topk_ids = args.topk_ids;
  route.num_experts = kE;
  ASSERT_EQ(tailor_moe_route(runtime_, &route, ws_), TAILOR_STATUS_OK)
      << LastError();
  tailor_moe_workspace_info info;
  ASSERT_EQ(tailor_moe_workspace_get_info(ws_, &info), TAILOR_STATUS_OK);
  EXPECT_EQ(info.routed, 1);
  EXPECT_EQ(info.num_rows, kT * kK);
  EXPECT_EQ(info.useful_rows, kT * kK);
  EXPECT_EQ(info.permutation.rank, 1);
  EXPECT_EQ(info.inverse.dims[1], kK);
  const int64_t rows = info.num_rows;
  std::vector<float> a(rows * kH), c1(rows * kI), c2(rows * kH);
  const int64_t a_dims[2] = {rows, kH}, c1_dims[2] = {rows, kI};
  tailor_moe_pack_args pack = {};
  pack.hidden = args.hidden;
  pack.permutation = info.permutation;
  pack.topk = kK;
  pack.a = tailor_tensor_contiguous(a.data(), TAILOR_DTYPE_F32, 2, a_dims);
  ASSERT_EQ(tailor_moe_pack(runtime_, &pack), TAILOR_STATUS_OK) << LastError();
  tailor_moe_grouped_gemm_args gemm = {};
  gemm.a = pack.a;
  gemm.w = args.w13;
  gemm.c = tailor_tensor_contiguous(c1.data(), TAILOR_DTYPE_F32, 2, c1_dims);
  gemm.epilogue = TAILOR_MOE_EPILOGUE_SILU_AND_MUL;
  ASSERT_EQ(tailor_moe_grouped_gemm(runtime_, &gemm, ws_), TAILOR_STATUS_OK)
      << LastError();
  gemm.a = gemm.c;
  gemm.w = args.w2;
  gemm.c = tailor_tensor_contiguous(c2.data(), TAILOR_DTYPE_F32, 2, a_dims);
  gemm.epilogue = TAILOR_MOE_EPILOGUE_NONE;
  ASSERT_EQ(tailor_moe_grouped_gemm(runtime_, &gemm, ws_), TAILOR_STATUS_OK)
      << LastError();
  std::fill(out_.begin(), out_.end(), 0.0f);
  tailor_moe_combine_args combine = {};
  combine.c = gemm.c;
  combine.topk_weights = args.topk_weights;
  combine.inverse = info.inverse;
  combine.out = args.out;
  ASSERT_EQ(tailor_moe_combine(runtime_, &combine), TAILOR_STATUS_OK)
      << LastError();
  EXPECT_EQ(0, std::memcmp(out_.data(), fused.data(), out_.size() * 4));
}

// The plan summary's GEMM records through C: one per GroupedGemm launch
// since the last Route (Experts: gate/up, then down), each the CPU
// backend's configuration for that launch's N and K.
TEST_F(CApiTest, GemmChoicesRecordEachLaunch) {
  static_assert(sizeof(tailor_moe_gemm_choice) ==
                    TAILOR_MOE_GEMM_KERNEL_SIZE + 2 * 8 + 6 * 4 +
                        TAILOR_MOE_GEMM_FEATURES_SIZE,
                "no padding: records compare bytewise, ctypes mirrors them");
  auto gemms = [&] {
    int32_t count = -1;
    EXPECT_EQ(tailor_moe_workspace_gemm_count(ws_, &count), TAILOR_STATUS_OK);
    std::vector<tailor_moe_gemm_choice> out(std::max(count, 0));
    for (int32_t i = 0; i < count; ++i) {
      EXPECT_EQ(tailor_moe_workspace_get_gemm(ws_, i, &out[i]),
                TAILOR_STATUS_OK)
          << LastError();
    }
    return out;
  };
  EXPECT_TRUE(gemms().empty());  // never routed

  FillInputs();
  tailor_moe_experts_args args = ExpertsArgs();
  ASSERT_EQ(tailor_moe_experts(runtime_, &args, ws_), TAILOR_STATUS_OK)
      << LastError();
  tailor_moe_workspace_info info;
  ASSERT_EQ(tailor_moe_workspace_get_info(ws_, &info), TAILOR_STATUS_OK);
  const std::vector<tailor_moe_gemm_choice> experts = gemms();
  ASSERT_EQ(experts.size(), 2u);
  const int64_t n[2] = {2 * kI, kH}, k[2] = {kH, kI};  // gate/up, down
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const tailor_moe_gemm_choice& g = experts[i];
    EXPECT_STREQ(g.kernel, "cpu");
    EXPECT_EQ(g.n, n[i]);
    EXPECT_EQ(g.k, k[i]);
    EXPECT_EQ(g.cta_rows, info.tile_rows);
    EXPECT_GT(g.cta_cols, 0);
    EXPECT_EQ(g.k_tile, 0);  // the CPU kernel has no pipeline or grid
    EXPECT_EQ(g.stages, 0);
    EXPECT_EQ(g.ctas, 0);
    EXPECT_STREQ(g.features, "");  // the CPU kernel has no options
    EXPECT_EQ(g.features_cut, 0);
  }

  // A Route starts the records over; one GroupedGemm adds one.
  tailor_moe_route_args route = {};
  route.topk_ids = args.topk_ids;
  route.num_experts = kE;
  ASSERT_EQ(tailor_moe_route(runtime_, &route, ws_), TAILOR_STATUS_OK);
  EXPECT_TRUE(gemms().empty());
  const int64_t rows = kT * kK;
  std::vector<float> a(rows * kH), c(rows * kI);
  const int64_t a_dims[2] = {rows, kH}, c_dims[2] = {rows, kI};
  tailor_moe_grouped_gemm_args gemm = {};
  gemm.a = tailor_tensor_contiguous(a.data(), TAILOR_DTYPE_F32, 2, a_dims);
  gemm.w = args.w13;
  gemm.c = tailor_tensor_contiguous(c.data(), TAILOR_DTYPE_F32, 2, c_dims);
  gemm.epilogue = TAILOR_MOE_EPILOGUE_SILU_AND_MUL;
  ASSERT_EQ(tailor_moe_grouped_gemm(runtime_, &gemm, ws_), TAILOR_STATUS_OK)
      << LastError();
  const std::vector<tailor_moe_gemm_choice> one = gemms();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(0, std::memcmp(&one[0], &experts[0], sizeof(one[0])));
}

TEST_F(CApiTest, GemmChoiceErrorsNameTheArgument) {
  int32_t count = 0;
  tailor_moe_gemm_choice g;
  EXPECT_EQ(tailor_moe_workspace_gemm_count(nullptr, &count),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "ws: must not be null");
  EXPECT_EQ(tailor_moe_workspace_gemm_count(ws_, nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "count: must not be null");
  EXPECT_EQ(tailor_moe_workspace_get_gemm(nullptr, 0, &g),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "ws: must not be null");
  EXPECT_EQ(tailor_moe_workspace_get_gemm(ws_, 0, nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "out: must not be null");
  EXPECT_EQ(tailor_moe_workspace_get_gemm(ws_, 0, &g),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "index: must be in [0, 0) (the GEMM records of ws), got 0");

  FillInputs();
  tailor_moe_experts_args args = ExpertsArgs();
  ASSERT_EQ(tailor_moe_experts(runtime_, &args, ws_), TAILOR_STATUS_OK)
      << LastError();
  for (int32_t index : {-1, 2, INT32_MAX}) {
    EXPECT_EQ(tailor_moe_workspace_get_gemm(ws_, index, &g),
              TAILOR_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(LastError(),
              "index: must be in [0, 2) (the GEMM records of "
              "ws), got " +
                  std::to_string(index));
  }
  EXPECT_EQ(tailor_moe_workspace_get_gemm(ws_, 1, &g), TAILOR_STATUS_OK);
  EXPECT_EQ(LastError(), "");
}

TEST_F(CApiTest, OpErrorsCarryTheCppMessage) {
  FillInputs();
  tailor_moe_experts_args args = ExpertsArgs();
  ids_[3 * kK + 1] = 9;
  EXPECT_EQ(tailor_moe_experts(runtime_, &args, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "topk_ids[3,1]: expert id 9 is outside [0, 4)");

  args = ExpertsArgs();
  args.topk_ids.dtype = 42;
  EXPECT_EQ(tailor_moe_experts(runtime_, &args, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "topk_ids.dtype: not a tailor_dtype value (1..8), got 42");
  args = ExpertsArgs();
  args.w2.rank = 7;
  EXPECT_EQ(tailor_moe_experts(runtime_, &args, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "w2: rank must be in [0, 6], got 7");
  args = ExpertsArgs();
  args.hidden.device_type = 5;
  EXPECT_EQ(tailor_moe_experts(runtime_, &args, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "hidden.device_type: not a tailor_device_type value (0..2), got 5");
  args = ExpertsArgs();
  args.activation = 1;
  EXPECT_EQ(tailor_moe_experts(runtime_, &args, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "activation: only TAILOR_MOE_ACTIVATION_SILU is supported, got 1");
  args = ExpertsArgs();
  args.policy.tail = 256;  // would be kNextPowerOfTwo as a uint8_t
  EXPECT_EQ(tailor_moe_experts(runtime_, &args, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "policy.tail: not a TailPolicy value: 256");
  EXPECT_EQ(tailor_moe_experts(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "args: must not be null");

  tailor_moe_grouped_gemm_args gemm = {};
  EXPECT_EQ(tailor_moe_grouped_gemm(runtime_, &gemm, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "a.dtype: not a tailor_dtype value (1..8), got 0");
}

// Regression (c_api_fuzz): a tailor_moe_route that the C layer rejected
// (a rank or enum out of range, null args) left the workspace routed with
// the previous step's routing, so a caller that went on ran GroupedGemm on
// stale rows. moe::Route leaves a failed workspace not routed; the C entry
// now does too, and the next step fails instead.
TEST_F(CApiTest, FailedRouteLeavesTheWorkspaceNotRouted) {
  FillInputs();
  tailor_moe_route_args route = {};
  route.topk_ids =
      tailor_tensor_contiguous(ids_.data(), TAILOR_DTYPE_I32, 2, topk_dims_);
  route.num_experts = kE;
  auto routed = [&] {
    tailor_moe_workspace_info info = {};
    EXPECT_EQ(tailor_moe_workspace_get_info(ws_, &info), TAILOR_STATUS_OK);
    return info.routed;
  };
  const char* const expected[] = {
      "topk_ids: rank must be in [0, 6], got -1",
      "topk_ids.dtype: not a tailor_dtype value (1..8), got 0",
      "policy.tail: not a TailPolicy value: 7", "args: must not be null"};
  for (int broken = 0; broken < 4; ++broken) {
    SCOPED_TRACE(expected[broken]);
    ASSERT_EQ(tailor_moe_route(runtime_, &route, ws_), TAILOR_STATUS_OK)
        << LastError();
    ASSERT_EQ(routed(), 1);
    tailor_moe_route_args bad = route;
    if (broken == 0) bad.topk_ids.rank = -1;
    if (broken == 1) bad.topk_ids.dtype = 0;
    if (broken == 2) bad.policy.tail = 7;
    EXPECT_EQ(tailor_moe_route(runtime_, broken == 3 ? nullptr : &bad, ws_),
              TAILOR_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(LastError(), expected[broken]);
    EXPECT_EQ(routed(), 0);
  }
  const int64_t rows = kT * kK;
  std::vector<float> a(rows * kH), c(rows * 2 * kI);
  const int64_t a_dims[2] = {rows, kH}, c_dims[2] = {rows, 2 * kI};
  tailor_moe_grouped_gemm_args gemm = {};
  gemm.a = tailor_tensor_contiguous(a.data(), TAILOR_DTYPE_F32, 2, a_dims);
  gemm.w =
      tailor_tensor_contiguous(w13_.data(), TAILOR_DTYPE_F32, 3, w13_dims_);
  gemm.c = tailor_tensor_contiguous(c.data(), TAILOR_DTYPE_F32, 2, c_dims);
  EXPECT_EQ(tailor_moe_grouped_gemm(runtime_, &gemm, ws_),
            TAILOR_STATUS_FAILED_PRECONDITION);
  EXPECT_EQ(LastError(),
            "ws: not routed; call moe::Route or moe::PlanRows first");
}

TEST_F(CApiTest, WorkspaceEntries) {
  tailor_moe_workspace_limits limits = {};
  limits.max_tokens = 16;
  limits.topk = kK;
  limits.num_experts = kE;
  limits.hidden = kH;
  limits.intermediate = kI;
  limits.dtype = TAILOR_DTYPE_F32;
  EXPECT_EQ(tailor_moe_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_OK)
      << LastError();
  int64_t bytes = -1;
  EXPECT_EQ(tailor_moe_workspace_bytes(runtime_, &limits, &bytes),
            TAILOR_STATUS_OK);
  EXPECT_EQ(bytes, 0);  // host backends keep their own buffers
  char memory[256];
  EXPECT_EQ(
      tailor_moe_workspace_bind(runtime_, &limits, memory, 256, ws_, nullptr),
      TAILOR_STATUS_UNIMPLEMENTED);
  EXPECT_THAT(LastError(), HasSubstr("cpu backend keeps workspaces in host"));
  EXPECT_EQ(tailor_moe_workspace_take_errors(runtime_, ws_, nullptr),
            TAILOR_STATUS_OK);

  limits.dtype = TAILOR_DTYPE_I32;
  EXPECT_EQ(tailor_moe_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "limits.dtype: must be TAILOR_DTYPE_BF16 or TAILOR_DTYPE_F32, "
            "got 4");
  EXPECT_EQ(tailor_moe_workspace_reserve(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "limits: must not be null");
  limits.dtype = 0;  // bf16
  limits.topk = 0;
  EXPECT_EQ(tailor_moe_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("topk"));
}

TEST(CApi, StatsEndpointAddress) {
  tailor_runtime_options options = {};
  options.backend = TAILOR_BACKEND_CPU;
  options.log_level = "error";
  options.disable_disk_cache = 1;
  options.stats_addr = "127.0.0.1:0";
  tailor_runtime* runtime = nullptr;
  ASSERT_EQ(tailor_runtime_create(&options, &runtime), TAILOR_STATUS_OK)
      << LastError();
  tailor_runtime_info info;
  ASSERT_EQ(tailor_runtime_get_info(runtime, &info), TAILOR_STATUS_OK);
  EXPECT_THAT(info.stats_address, StartsWith("127.0.0.1:"));
  tailor_runtime_destroy(runtime);
  options.stats_addr = "nowhere";
  EXPECT_EQ(tailor_runtime_create(&options, &runtime),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(),
            "stats_addr: expected host:port with a port in [0, 65535], got "
            "\"nowhere\"");
}

// options.jit_mode reaches the runtime: BACKGROUND serves a cold Experts
// call on the generic kernels (counted as fallback launches) with the
// blocking runtime's result; info reports the mode in use.
TEST_F(CApiTest, JitModeOption) {
  tailor_runtime_options options = {};
  options.backend = TAILOR_BACKEND_CPU;
  options.log_level = "error";
  options.disable_disk_cache = 1;  // every kernel is cold
  options.jit_mode = TAILOR_JIT_MODE_BLOCKING;
  tailor_runtime* runtime = nullptr;
  ASSERT_EQ(tailor_runtime_create(&options, &runtime), TAILOR_STATUS_OK)
      << LastError();
  tailor_runtime_info info;
  ASSERT_EQ(tailor_runtime_get_info(runtime, &info), TAILOR_STATUS_OK);
  EXPECT_EQ(info.jit_mode, TAILOR_JIT_MODE_BLOCKING);
  tailor_runtime_destroy(runtime);

  options.jit_mode = TAILOR_JIT_MODE_BACKGROUND;
  ASSERT_EQ(tailor_runtime_create(&options, &runtime), TAILOR_STATUS_OK)
      << LastError();
  ASSERT_EQ(tailor_runtime_get_info(runtime, &info), TAILOR_STATUS_OK);
  EXPECT_EQ(info.jit_mode, TAILOR_JIT_MODE_BACKGROUND);

  FillInputs();
  tailor_moe_experts_args args = ExpertsArgs();
  ASSERT_EQ(tailor_moe_experts(runtime_, &args, ws_), TAILOR_STATUS_OK)
      << LastError();
  const std::vector<float> blocking = out_;
  std::fill(out_.begin(), out_.end(), NAN);
  tailor_moe_workspace* ws = nullptr;
  ASSERT_EQ(tailor_moe_workspace_create(&ws), TAILOR_STATUS_OK);
  ASSERT_EQ(tailor_moe_experts(runtime, &args, ws), TAILOR_STATUS_OK)
      << LastError();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < out_.size(); ++i) {
    diff += (out_[i] - blocking[i]) * (out_[i] - blocking[i]);
    norm += blocking[i] * blocking[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  char* text = nullptr;
  ASSERT_EQ(tailor_runtime_stats(runtime, TAILOR_STATS_JSON, &text),
            TAILOR_STATUS_OK);
  EXPECT_THAT(text, HasSubstr("\"fallback_launches\": "));
  EXPECT_THAT(text, Not(HasSubstr("\"fallback_launches\": 0,")));
  tailor_string_free(text);
  tailor_moe_workspace_destroy(ws);
  tailor_runtime_destroy(runtime);
}

TEST_F(CApiTest, LastErrorIsPerThread) {
  EXPECT_EQ(tailor_moe_experts(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] {
    tailor_runtime_info info;
    EXPECT_EQ(tailor_runtime_get_info(runtime_, &info), TAILOR_STATUS_OK);
    other = LastError();
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(LastError(), "args: must not be null");
}

}  // namespace
