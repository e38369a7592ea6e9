// tests/ops/moe/cuda_test_util.h — the moe:: ops on a CUDA runtime: device
// copies of HostTensors, the host reference Route (a plain stable counting
// sort, what the CPU backend computes) and plan, and a fixture that skips
// without a device.
#ifndef TAILOR_TESTS_OPS_MOE_CUDA_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_MOE_CUDA_TEST_UTIL_H_

#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/generic_image.h"
#include "ops/moe/moe_test_util.h"
#include "plan/piecewise_plan.h"

namespace tailor::moe::testing {

using ::tailor::cuda::testing::CudaTestRuntime;
using ::tailor::cuda::testing::DeviceBuffer;

inline constexpr Device kCuda0 = {.type = DeviceType::kCuda, .index = 0};

// A device copy of a HostTensor, with views.
class DeviceTensor {
 public:
  DeviceTensor(const cuda::DriverApi& api, const HostTensor& host)
      : host_(host),
        buffer_(std::make_unique<DeviceBuffer>(
            api, static_cast<size_t>(host.numel()) * DTypeSize(host.dtype()))) {
    Upload(host);
  }
  // Re-uploads `host` (same shape) into the same device memory.
  void Upload(const HostTensor& host) {
    host_ = host;
    ASSERT_TRUE(buffer_->ok());
    TAILOR_ASSERT_OK(buffer_->Upload(host.ref().data, buffer_->bytes()));
  }
  TensorRef ref() const {
    TensorRef t = host_.ref();
    t.data = buffer_->data();
    t.device = kCuda0;
    return t;
  }
  // The device contents as a HostTensor of the same shape.
  HostTensor Download() const {
    HostTensor out = host_;
    absl::StatusOr<std::vector<uint8_t>> bytes = buffer_->Download();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (bytes.ok() && !bytes->empty()) {
      std::memcpy(const_cast<void*>(out.ref().data), bytes->data(),
                  bytes->size());
    }
    return out;
  }
  const DeviceBuffer& buffer() const { return *buffer_; }

 private:
  HostTensor host_;
  std::unique_ptr<DeviceBuffer> buffer_;
};

// Copies `count` i32 of device memory at `device` to the host.
inline std::vector<int32_t> DownloadI32(const cuda::DriverApi& api,
                                        const void* device, int64_t count) {
  std::vector<int32_t> host(static_cast<size_t>(count));
  if (count == 0) return host;
  EXPECT_EQ(api.cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(device),
                             host.size() * 4),
            CUDA_SUCCESS);
  return host;
}

// What a host Route computes: stable counting sort by local expert.
struct ReferenceRouting {
  std::vector<int32_t> counts, offsets, permutation, inverse;
};
inline ReferenceRouting ReferenceRoute(const HostTensor& ids,
                                       const HostTensor* map, int64_t experts,
                                       int64_t valid_tokens, int64_t k) {
  ReferenceRouting r;
  const int64_t assignments = ids.numel();
  r.counts.assign(experts, 0);
  r.inverse.assign(assignments, -1);
  auto local = [&](int64_t i) {
    return i < valid_tokens * k ? LocalExpert(ids, map, i) : -1;
  };
  for (int64_t i = 0; i < assignments; ++i) {
    if (local(i) >= 0) ++r.counts[local(i)];
  }
  r.offsets.assign(experts + 1, 0);
  for (int64_t e = 0; e < experts; ++e)
    r.offsets[e + 1] = r.offsets[e] + r.counts[e];
  std::vector<int32_t> cursor(r.offsets.begin(), r.offsets.end() - 1);
  r.permutation.assign(r.offsets[experts], 0);
  for (int64_t i = 0; i < assignments; ++i) {
    const int32_t e = local(i);
    if (e < 0) continue;
    r.permutation[cursor[e]] = static_cast<int32_t>(i);
    r.inverse[i] = cursor[e]++;
  }
  return r;
}

// The host planner's work list for `counts`.
inline std::vector<plan::WorkItem> ReferenceWork(
    const std::vector<int32_t>& counts, const plan::PlanParams& params) {
  std::vector<int64_t> extents(counts.begin(), counts.end());
  plan::PiecewisePlan plan;
  absl::Status built = plan::BuildPiecewisePlan(extents, params, &plan);
  EXPECT_TRUE(built.ok()) << built;
  return {plan.work().begin(), plan.work().end()};
}

// Routing ids [T, 2] that give expert e exactly counts[e] rows (each at most
// T = sum / 2): the sorted assignment list L pairs token t with L[t] and
// L[t + T], two different experts since none fills T + 1 slots.
inline HostTensor IdsWithCounts(const std::vector<int32_t>& counts) {
  std::vector<int32_t> list;
  for (size_t e = 0; e < counts.size(); ++e) {
    list.insert(list.end(), counts[e], static_cast<int32_t>(e));
  }
  const int64_t tokens = static_cast<int64_t>(list.size()) / 2;
  HostTensor ids(DType::kI32, {tokens, 2});
  for (int64_t t = 0; t < tokens; ++t) {
    ids.set(2 * t, list[t]);
    ids.set(2 * t + 1, list[t + tokens]);
  }
  return ids;
}

// One CUDA runtime per test binary (its memory cache serves every test:
// NVRTC compiles each variant once), or the reason there is none.
inline absl::StatusOr<CudaTestRuntime*> SharedCudaRuntime() {
  static absl::StatusOr<std::unique_ptr<CudaTestRuntime>>* env =
      new absl::StatusOr<std::unique_ptr<CudaTestRuntime>>(
          CudaTestRuntime::Create());
  if (!env->ok()) return env->status();
  return env->value().get();
}

// The same for a runtime with the tuning keys `tuning` (read when a runtime
// is created): one per distinct text, kept for the binary's life; "" is
// the shared runtime above. Unavailable without a device.
inline absl::StatusOr<CudaTestRuntime*> SharedCudaRuntime(
    const std::string& tuning) {
  if (tuning.empty()) return SharedCudaRuntime();
  static auto* runtimes =
      new std::map<std::string,
                   absl::StatusOr<std::unique_ptr<CudaTestRuntime>>>();
  auto it = runtimes->find(tuning);
  if (it == runtimes->end()) {
    Runtime::Options options = CudaTestRuntime::DefaultOptions();
    options.tuning = tuning;
    it = runtimes->emplace(tuning, CudaTestRuntime::Create(options)).first;
  }
  if (!it->second.ok()) return it->second.status();
  return it->second.value().get();
}

// The kernels a parameterized GPU test runs: the runtime's tuning keys
// ("": the device's choice), and whether it runs the generic kernels of
// background JIT only (TAILOR_DISABLE_JIT: nothing compiles, every launch
// a fallback; skipped when the library has no built-in generic image).
struct KernelChoice {
  std::string tuning;
  bool generic_only = false;
  std::string name;  // the test name's suffix
};

// The shared runtime of `choice`: as SharedCudaRuntime(tuning), one per
// choice for the binary's life.
inline absl::StatusOr<CudaTestRuntime*> SharedCudaRuntime(
    const KernelChoice& choice) {
  if (!choice.generic_only) return SharedCudaRuntime(choice.tuning);
  static auto* runtimes =
      new std::map<std::string,
                   absl::StatusOr<std::unique_ptr<CudaTestRuntime>>>();
  auto it = runtimes->find(choice.tuning);
  if (it == runtimes->end()) {
    Runtime::Options options = CudaTestRuntime::DefaultOptions();
    options.tuning = choice.tuning;
    it = runtimes
             ->emplace(choice.tuning,
                       CudaTestRuntime::Create(CudaTestRuntime::BackgroundJit(
                           options, /*disable_jit=*/true)))
             .first;
  }
  if (!it->second.ok()) return it->second.status();
  return it->second.value().get();
}

// The kernels the FP8 GPU tests run: the device's choice (the Hopper
// kernels on sm_90a), moe.gemm=portable (the mma.sync kernels), and the
// generic kernels that stand in for each path's keys while they compile.
inline std::vector<KernelChoice> Fp8KernelChoices() {
  return {{.tuning = "", .name = "DeviceChoice"},
          {.tuning = "moe.gemm=portable", .name = "Portable"},
          {.tuning = "", .generic_only = true, .name = "DeviceChoiceGeneric"},
          {.tuning = "moe.gemm=portable",
           .generic_only = true,
           .name = "PortableGeneric"}};
}
inline void PrintTo(const KernelChoice& choice, std::ostream* os) {
  *os << choice.name;
}
inline std::string KernelChoiceName(
    const ::testing::TestParamInfo<KernelChoice>& info) {
  return info.param.name;
}

// A test on the shared CUDA runtime, or a skip without a device.
class MoeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { SetUpWith(""); }
  // SetUp on the shared runtime of the tuning keys `tuning`.
  void SetUpWith(const std::string& tuning) { SetUpWith(KernelChoice{tuning}); }
  // SetUp on the shared runtime of `choice`.
  void SetUpWith(const KernelChoice& choice) {
    absl::StatusOr<CudaTestRuntime*> env = SharedCudaRuntime(choice);
    if (!env.ok()) {
      ASSERT_EQ(env.status().code(), absl::StatusCode::kUnavailable)
          << env.status();
      GTEST_SKIP() << "no CUDA device here: " << env.status();
    }
    if (choice.generic_only && cuda::kNumGenericImages == 0) {
      GTEST_SKIP() << "library built without the generic CUDA image";
    }
    env_ = *env;
  }
  Runtime& runtime() { return env_->runtime(); }
  const cuda::DriverApi& api() { return env_->api(); }
  DeviceTensor ToDevice(const HostTensor& host) {
    return DeviceTensor(api(), host);
  }

  // A bf16 grouped GEMM over one routing.
  struct GemmTwice {
    int64_t n = 0, k = 0;
    Epilogue epilogue = Epilogue::kNone;
    int64_t experts = 8, topk = 2;
    RoutingPolicy policy = {};
  };
  // Reserves `ws` for the tokens of `ids` [T, g.topk], routes them over
  // g.experts, then launches the GEMM of random A [rows, K] and W [E, N, K]
  // twice on that plan, C NaN-poisoned before each, both against fp64, and
  // takes the device errors: the second launch must find the counters the
  // first one reset (split-K arrivals, the consumers' turns).
  void CheckGroupedGemmTwice(const GemmTwice& g, const HostTensor& ids,
                             std::mt19937_64& rng, Workspace& ws) {
    const int64_t tokens = ids.numel() / g.topk;
    ASSERT_EQ(ids.numel(), tokens * g.topk) << "ids must be [tokens, k]";
    const bool gated = g.epilogue == Epilogue::kSiluAndMul;
    DeviceTensor d_ids = ToDevice(ids);
    TAILOR_ASSERT_OK(ReserveWorkspace(runtime(),
                                      {.max_tokens = tokens,
                                       .topk = g.topk,
                                       .num_experts = g.experts,
                                       .policy = g.policy},
                                      ws));
    TAILOR_ASSERT_OK(Route(
        runtime(),
        {.topk_ids = d_ids.ref(), .num_experts = g.experts, .policy = g.policy},
        ws));
    const int64_t rows = ws.num_rows();
    HostTensor a(DType::kBF16, {rows, g.k});
    HostTensor w(DType::kBF16, {g.experts, g.n, g.k});
    a.FillRandom(rng);
    w.FillRandom(rng, 0.5);
    DeviceTensor d_a = ToDevice(a), d_w = ToDevice(w);
    const ReferenceRouting ref =
        ReferenceRoute(ids, nullptr, g.experts, tokens, g.topk);
    const std::vector<double> expected =
        ReferenceGroupedGemm(a, w, ref.offsets, g.n, g.k, gated);
    for (int launch = 0; launch < 2; ++launch) {
      HostTensor c(DType::kBF16, {rows, gated ? g.n / 2 : g.n});
      c.Poison();
      DeviceTensor d_c = ToDevice(c);
      TAILOR_ASSERT_OK(GroupedGemm(runtime(),
                                   {.a = d_a.ref(),
                                    .w = d_w.ref(),
                                    .c = d_c.ref(),
                                    .epilogue = g.epilogue},
                                   ws));
      EXPECT_LT(RelativeError(d_c.Download(), expected),
                Tolerance(DType::kBF16))
          << "launch " << launch;
    }
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
  }

  CudaTestRuntime* env_ = nullptr;
};

}  // namespace tailor::moe::testing

#endif  // TAILOR_TESTS_OPS_MOE_CUDA_TEST_UTIL_H_
