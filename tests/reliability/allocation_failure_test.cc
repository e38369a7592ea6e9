// moe:: entries whose Workspace cannot grow return ResourceExhausted; no
// std::bad_alloc crosses the API (which would terminate the server). Found
// by moe_api_fuzz: PlanRows of legal counts summing to 2^31 - 1 rows
// reserves a plan of 8 GB, and Experts / ReserveWorkspace size their
// buffers from the caller's shapes. Each case runs in a child process whose
// address space is capped (RLIMIT_AS) a little above what it already uses.
#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "reliability/reliability_util.h"

namespace tailor::reliability {
namespace {

using ::testing::HasSubstr;

// Caps the address space of this (child) process at its current size plus
// `headroom` bytes.
std::string CapAddressSpace(size_t headroom) {
  std::ifstream status("/proc/self/status");
  size_t vm_kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoull(line.substr(7));
  }
  if (vm_kib == 0) return "no VmSize in /proc/self/status";
  rlimit limit = {.rlim_cur = vm_kib * 1024 + headroom,
                  .rlim_max = vm_kib * 1024 + headroom};
  if (setrlimit(RLIMIT_AS, &limit) != 0)
    return std::string("setrlimit: ") + std::strerror(errno);
  return "";
}

// Runs `call` in a child with its address space capped; the status it
// returns must be ResourceExhausted mentioning `what`.
void ExpectResourceExhausted(std::function<absl::Status(Runtime&)> call,
                             const std::string& what) {
#ifdef TAILOR_UNDER_SANITIZER
  GTEST_SKIP() << "sanitizers reserve terabytes and abort on failed "
                  "allocations instead of throwing";
#endif
  ChildOutcome outcome = RunInChild(
      [&]() -> std::string {
        auto runtime = CpuRuntime({});
        if (!runtime.ok()) return runtime.status().ToString();
        if (std::string e = CapAddressSpace(size_t{256} << 20); !e.empty())
          return e;
        absl::Status s = call(**runtime);
        if (s.code() != absl::StatusCode::kResourceExhausted ||
            s.message().find(what) == absl::string_view::npos) {
          return "expected ResourceExhausted about " + what + ", got " +
                 s.ToString();
        }
        return "";
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
}

TEST(AllocationFailureTest, PlanRowsOfTwoBillionRows) {
  ExpectResourceExhausted(
      [](Runtime& runtime) {
        int32_t counts[] = {2147483647};
        moe::Workspace ws;
        absl::Status s = moe::PlanRows(
            runtime,
            {.counts = TensorRef::Contiguous(counts, DType::kI32, {1}),
             .policy = {.tile_rows = 1}},
            ws);
        if (ws.routed()) return absl::InternalError("routed after failing");
        return s;
      },
      "moe.plan_rows: cannot allocate");
}

TEST(AllocationFailureTest, ReserveWorkspaceBeyondMemory) {
  ExpectResourceExhausted(
      [](Runtime& runtime) {
        moe::Workspace ws;
        return moe::ReserveWorkspace(runtime,
                                     {.max_tokens = 1 << 20,
                                      .topk = 8,
                                      .num_experts = 256,
                                      .hidden = 7168,
                                      .intermediate = 2048},
                                     ws);
      },
      "moe.reserve_workspace: cannot allocate");
}

// Peak resident memory of this process, bytes.
int64_t PeakResidentBytes() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

// A host reservation that cannot fit grew its buffers one by one and wrote
// gigabytes (12 GB, 15 s at T = 2^28) before the last one failed, or met the
// OOM killer first. Now its total is computed first: here 2^27 rows of
// 65536 + 65536 f32 values (64 TiB) fail before the 1.5 GiB of index
// buffers that came first are touched. The address space is capped at 4 GiB
// more than in use, so that even a regression cannot take more.
TEST(AllocationFailureTest, ReservationThatCannotFitTouchesNoMemory) {
#ifdef TAILOR_UNDER_SANITIZER
  GTEST_SKIP() << "sanitizers keep their own accounting of large allocations";
#endif
  ChildOutcome outcome = RunInChild(
      [&]() -> std::string {
        auto runtime = CpuRuntime({});
        if (!runtime.ok()) return runtime.status().ToString();
        if (std::string e = CapAddressSpace(size_t{4} << 30); !e.empty())
          return e;
        const int64_t peak_before = PeakResidentBytes();
        const auto start = std::chrono::steady_clock::now();
        moe::Workspace ws;
        absl::Status s = moe::ReserveWorkspace(**runtime,
                                               {.max_tokens = 1 << 25,
                                                .topk = 4,
                                                .num_experts = 8,
                                                .hidden = 65536,
                                                .intermediate = 65536,
                                                .dtype = DType::kF32},
                                               ws);
        const double seconds = std::chrono::duration<double>(
                                   std::chrono::steady_clock::now() - start)
                                   .count();
        const int64_t grown = PeakResidentBytes() - peak_before;
        if (grown > (int64_t{64} << 20) || seconds > 1.0) {
          return absl::StrCat("the refused reservation touched ", grown,
                              " bytes in ", seconds, " s");
        }
        if (s.code() != absl::StatusCode::kResourceExhausted ||
            s.message().find(" bytes of host workspace for these limits (T x "
                             "k = 134217728 rows of H + I = 131072 f32 "
                             "values): more than the ") ==
                absl::string_view::npos) {
          return "expected ResourceExhausted naming the total, got " +
                 s.ToString();
        }
        return "";
      },
      std::chrono::seconds(120));
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
}

TEST(AllocationFailureTest, ExpertsWhoseIntermediatesDoNotFit) {
  // hidden [64, 65536] bf16 with k = 64: the intermediates are R x (H + I)
  // = 4096 x 65537 elements, 512 MiB, more than the cap leaves.
  constexpr int64_t kTokens = 64, kTopk = 64, kExperts = 64, kH = 65536;
  std::vector<uint16_t> hidden(kTokens * kH), out(kTokens * kH);
  std::vector<uint16_t> w13(kExperts * 2 * kH), w2(kExperts * kH);
  std::vector<float> weights(kTokens * kTopk, 1.0f);
  std::vector<int32_t> ids(kTokens * kTopk);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % kExperts;
  ExpectResourceExhausted(
      [&](Runtime& runtime) {
        moe::Workspace ws;
        return moe::Experts(runtime,
                            {.hidden = TensorRef::Contiguous(
                                 hidden.data(), DType::kBF16, {kTokens, kH}),
                             .w13 = TensorRef::Contiguous(
                                 w13.data(), DType::kBF16, {kExperts, 2, kH}),
                             .w2 = TensorRef::Contiguous(
                                 w2.data(), DType::kBF16, {kExperts, kH, 1}),
                             .topk_weights = TensorRef::Contiguous(
                                 weights.data(), DType::kF32, {kTokens, kTopk}),
                             .topk_ids = TensorRef::Contiguous(
                                 ids.data(), DType::kI32, {kTokens, kTopk}),
                             .out = TensorRef::Contiguous(
                                 out.data(), DType::kBF16, {kTokens, kH})},
                            ws);
      },
      "moe.experts: cannot allocate");
}

}  // namespace
}  // namespace tailor::reliability
