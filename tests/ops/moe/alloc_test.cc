// A warm server step allocates nothing: after ReserveWorkspace and one step
// per tail class (kernels compiled), Experts over new ragged routings makes
// zero heap allocations. Counted by replacing global operator new, so this
// test is its own binary.
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"

// Sanitizers interpose the allocator themselves; counting is only meaningful
// (and replacing operator new only safe) without them. Clang 14 defines
// neither __SANITIZE_* macro, hence TAILOR_UNDER_SANITIZER (CMakeLists.txt).
#if defined(TAILOR_UNDER_SANITIZER) || defined(__SANITIZE_ADDRESS__) || \
    defined(__SANITIZE_THREAD__)
#define TAILOR_COUNT_ALLOCATIONS 0
#else
#define TAILOR_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};

void* CountedAlloc(size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
}  // namespace

#if TAILOR_COUNT_ALLOCATIONS
void* operator new(size_t size) { return CountedAlloc(size); }
void* operator new[](size_t size) { return CountedAlloc(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#endif

namespace tailor {
namespace {

constexpr int64_t kExperts = 16, kTopk = 4, kHidden = 64, kInter = 32,
                  kMaxTokens = 300;

TEST(MoeAllocationTest, WarmExpertsStepsAllocateNothing) {
  if (!TAILOR_COUNT_ALLOCATIONS)
    GTEST_SKIP() << "allocations are not counted under sanitizers";
  ::tailor::testing::TempDir dir;
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = dir.path();
  options.log_level = "error";
  auto runtime = Runtime::Create(options);
  if (absl::IsUnavailable(runtime.status())) {
    // e.g. the GPU bundle, built without the CPU JIT.
    GTEST_SKIP() << "no cpu backend in this build: " << runtime.status();
  }
  ASSERT_TRUE(runtime.ok()) << runtime.status();

  std::mt19937 rng(::tailor::testing::TestSeed());
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> w13(kExperts * 2 * kInter * kHidden),
      w2(kExperts * kHidden * kInter);
  std::vector<float> hidden(kMaxTokens * kHidden), out(kMaxTokens * kHidden);
  std::vector<float> weights(kMaxTokens * kTopk, 0.25f);
  std::vector<int32_t> ids(kMaxTokens * kTopk);
  for (auto* v : {&w13, &w2, &hidden}) {
    for (float& x : *v) x = dist(rng);
  }
  moe::Workspace ws;
  TAILOR_ASSERT_OK(moe::ReserveWorkspace(**runtime,
                                         {.max_tokens = kMaxTokens,
                                          .topk = kTopk,
                                          .num_experts = kExperts,
                                          .hidden = kHidden,
                                          .intermediate = kInter,
                                          .dtype = DType::kF32},
                                         ws));
  auto step = [&](int64_t tokens) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < kTopk; ++j) {  // distinct experts per token
        ids[t * kTopk + j] =
            static_cast<int32_t>((t * 7 + j * 5 + rng() % 2) % kExperts);
      }
    }
    return moe::Experts(
        **runtime,
        {.hidden = TensorRef::Contiguous(hidden.data(), DType::kF32,
                                         {tokens, kHidden}),
         .w13 = TensorRef::Contiguous(w13.data(), DType::kF32,
                                      {kExperts, 2 * kInter, kHidden}),
         .w2 = TensorRef::Contiguous(w2.data(), DType::kF32,
                                     {kExperts, kHidden, kInter}),
         .topk_weights = TensorRef::Contiguous(weights.data(), DType::kF32,
                                               {tokens, kTopk}),
         .topk_ids =
             TensorRef::Contiguous(ids.data(), DType::kI32, {tokens, kTopk}),
         .out =
             TensorRef::Contiguous(out.data(), DType::kF32, {tokens, kHidden})},
        ws);
  };
  // Warm-up: every tail class and the core get compiled.
  for (int64_t tokens = 1; tokens <= 64; ++tokens)
    TAILOR_ASSERT_OK(step(tokens));
  const uint64_t compiles = (*runtime)->stats().compiles;

  counting = true;
  absl::Status status = absl::OkStatus();
  for (int i = 0; i < 50 && status.ok(); ++i)
    status = step(1 + rng() % kMaxTokens);
  counting = false;
  TAILOR_ASSERT_OK(status);
  EXPECT_EQ((*runtime)->stats().compiles, compiles)
      << "warm-up missed a variant";
  EXPECT_EQ(allocations.load(), 0)
      << "heap allocations in 50 warm Experts steps";
}

}  // namespace
}  // namespace tailor
