// Tests for backends/cuda/tma/descriptor_pool with a fake encoder: encode
// once and reuse, distinct specs, rejected specs never reach the encoder,
// concurrent requests for one spec encode it exactly once, and the bound:
// least recently used descriptors make room, under concurrency too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "backends/cuda/tma/descriptor_pool.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tailor::cuda {
namespace {

using ::testing::HasSubstr;

constexpr int kHopper = 90;
constexpr uint64_t kAddress = 0x7f0000000000;

// bf16 [rows, 4096] at `address`, 64 x 128 boxes with the 128-byte swizzle.
TensorMapSpec Bf16Matrix(uint64_t rows, uint64_t address = kAddress) {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kBfloat16,
      .rank = 2,
      .global_address = address,
      .global_dims = {4096, rows},
      .global_strides = {8192},
      .box_dims = {64, 128},
      .swizzle = TensorMapSwizzle::k128B,
  };
}

// What the fake "encodes": bytes derived from the spec, so that a descriptor
// handed out for the wrong spec is caught.
TensorMapBytes Fingerprint(const TensorMapSpec& spec) {
  const uint64_t h = absl::Hash<TensorMapSpec>{}(spec);
  TensorMapBytes bytes;
  for (size_t i = 0; i < sizeof(bytes.bytes); ++i) {
    bytes.bytes[i] = static_cast<uint8_t>((h >> (8 * (i % 8))) ^ i);
  }
  return bytes;
}

bool SameBytes(const TensorMapBytes& a, const TensorMapBytes& b) {
  return std::equal(std::begin(a.bytes), std::end(a.bytes),
                    std::begin(b.bytes));
}

// Counts calls in total and per spec; can fail the next `failures` calls and
// sleep in each call to widen race windows.
class FakeEncoder {
 public:
  TensorMapEncoder AsEncoder() {
    return [this](const TensorMapSpec& spec, TensorMapBytes* out) {
      calls_.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++calls_per_spec_[spec];
      }
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      if (failures_.load() > 0) {
        failures_.fetch_sub(1);
        return absl::InternalError("fake encoder: injected failure");
      }
      *out = Fingerprint(spec);
      return absl::OkStatus();
    };
  }
  int calls() const { return calls_.load(); }
  int MaxCallsForOneSpec() {
    std::lock_guard<std::mutex> lock(mutex_);
    int max_calls = 0;
    for (const auto& [spec, n] : calls_per_spec_) {
      max_calls = std::max(max_calls, n);
    }
    return max_calls;
  }
  void FailNext(int n) { failures_.store(n); }
  void set_delay(std::chrono::milliseconds d) { delay_ = d; }

 private:
  std::atomic<int> calls_{0};
  std::atomic<int> failures_{0};
  std::chrono::milliseconds delay_{0};
  std::mutex mutex_;
  absl::flat_hash_map<TensorMapSpec, int> calls_per_spec_;
};

TEST(DescriptorPoolTest, EncodesOnceThenReuses) {
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder());
  const TensorMapSpec spec = Bf16Matrix(577);

  absl::StatusOr<TensorMapBytes> first = pool.GetOrEncode(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(SameBytes(*first, Fingerprint(spec)));

  absl::StatusOr<TensorMapBytes> second = pool.GetOrEncode(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(SameBytes(*second, *first));
  EXPECT_EQ(fake.calls(), 1);
  const DescriptorPoolCounters c = pool.counters();
  EXPECT_EQ(c.encodes, 1u);
  EXPECT_EQ(c.reuses, 1u);
  EXPECT_EQ(c.rejections, 0u);
  EXPECT_EQ(c.encode_failures, 0u);
  EXPECT_EQ(c.evictions, 0u);
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(pool.capacity(), kDefaultDescriptorPoolCapacity);
}

TEST(DescriptorPoolTest, DistinctSpecsEncodeSeparately) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder());

  // 577 distinct specs (rows 1..577, shuffled) force several rehashes.
  std::vector<TensorMapSpec> specs;
  for (uint64_t rows = 1; rows <= 577; ++rows)
    specs.push_back(Bf16Matrix(rows));
  specs.push_back(Bf16Matrix(577, kAddress + 16));  // differs in address only
  std::shuffle(specs.begin(), specs.end(), rng);

  for (const TensorMapSpec& spec : specs) {
    absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(spec);
    ASSERT_TRUE(map.ok()) << spec.ToString() << ": " << map.status();
    EXPECT_TRUE(SameBytes(*map, Fingerprint(spec))) << spec.ToString();
  }
  EXPECT_EQ(fake.calls(), static_cast<int>(specs.size()));
  EXPECT_EQ(pool.size(), specs.size());

  std::vector<size_t> order(specs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) {
    absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(specs[i]);
    ASSERT_TRUE(map.ok());
    EXPECT_TRUE(SameBytes(*map, Fingerprint(specs[i]))) << specs[i].ToString();
  }
  EXPECT_EQ(fake.calls(), static_cast<int>(specs.size()));
  EXPECT_EQ(pool.counters().encodes, specs.size());
  EXPECT_EQ(pool.counters().reuses, specs.size());
  EXPECT_EQ(pool.counters().evictions, 0u);
}

// At the bound a new spec evicts the least recently used one; a lookup
// refreshes its spec, so a spec in use stays.
TEST(DescriptorPoolTest, TheLeastRecentlyUsedMakesRoom) {
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder(), /*capacity=*/3);
  const TensorMapSpec a = Bf16Matrix(1), b = Bf16Matrix(2), c = Bf16Matrix(3),
                      d = Bf16Matrix(4);
  for (const TensorMapSpec& spec : {a, b, c}) {
    ASSERT_TRUE(pool.GetOrEncode(spec).ok());
  }
  ASSERT_TRUE(pool.GetOrEncode(a).ok());  // a is now the newest
  ASSERT_TRUE(pool.GetOrEncode(d).ok());  // evicts b, the oldest
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_EQ(pool.counters().evictions, 1u);
  EXPECT_EQ(fake.calls(), 4);
  for (const TensorMapSpec& spec : {a, c, d}) {  // still held
    absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(spec);
    ASSERT_TRUE(map.ok());
    EXPECT_TRUE(SameBytes(*map, Fingerprint(spec)));
  }
  EXPECT_EQ(fake.calls(), 4);
  absl::StatusOr<TensorMapBytes> again = pool.GetOrEncode(b);  // re-encoded
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SameBytes(*again, Fingerprint(b)));
  EXPECT_EQ(fake.calls(), 5);
  EXPECT_EQ(pool.counters().evictions, 2u);  // a, the oldest after c, d
  EXPECT_EQ(pool.size(), 3u);
  const DescriptorPoolCounters counts = pool.counters();
  EXPECT_EQ(counts.encodes, 5u);
  EXPECT_EQ(counts.reuses, 4u);
}

// A spec stream that never repeats (addresses and extents of every step)
// keeps the pool at its bound instead of growing.
TEST(DescriptorPoolTest, NeverGrowsPastItsBound) {
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder(), /*capacity=*/8);
  for (uint64_t rows = 1; rows <= 10000; ++rows) {
    ASSERT_TRUE(pool.GetOrEncode(Bf16Matrix(rows)).ok());
    ASSERT_LE(pool.size(), 8u);
  }
  EXPECT_EQ(pool.counters().encodes, 10000u);
  EXPECT_EQ(pool.counters().evictions, 10000u - 8u);
  EXPECT_EQ(pool.size(), 8u);
}

TEST(DescriptorPoolTest, RejectedSpecNeverReachesTheEncoder) {
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder());

  TensorMapSpec too_big_box = Bf16Matrix(577);
  too_big_box.box_dims[1] = 257;
  absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(too_big_box);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(map.status().message()),
              HasSubstr("boxDim[1]: must be in [1, 256], got 257"));

  TensorMapSpec atom_on_hopper = Bf16Matrix(577);
  atom_on_hopper.swizzle = TensorMapSwizzle::k128BAtom32B;
  map = pool.GetOrEncode(atom_on_hopper);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(map.status().message()),
              HasSubstr("128B_ATOM_32B needs sm_100"));

  // Asking again re-checks (rejections are not cached) and still never
  // encodes.
  EXPECT_FALSE(pool.GetOrEncode(too_big_box).ok());
  EXPECT_EQ(fake.calls(), 0);
  EXPECT_EQ(pool.counters().rejections, 3u);
  EXPECT_EQ(pool.counters().encodes, 0u);
  EXPECT_EQ(pool.size(), 0u);
}

TEST(DescriptorPoolTest, EncoderFailureIsReturnedAndRetried) {
  FakeEncoder fake;
  fake.FailNext(1);
  DescriptorPool pool(kHopper, fake.AsEncoder());
  const TensorMapSpec spec = Bf16Matrix(17);

  absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(spec);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(map.status().message()),
              HasSubstr("injected failure"));
  EXPECT_EQ(pool.counters().encode_failures, 1u);
  EXPECT_EQ(pool.size(), 0u);

  map = pool.GetOrEncode(spec);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE(SameBytes(*map, Fingerprint(spec)));
  EXPECT_EQ(fake.calls(), 2);
  EXPECT_EQ(pool.counters().encodes, 1u);
}

TEST(DescriptorPoolTest, SixteenThreadsOneSpecEncodeOnce) {
  FakeEncoder fake;
  fake.set_delay(std::chrono::milliseconds(20));  // keep the race window open
  DescriptorPool pool(kHopper, fake.AsEncoder());
  const TensorMapSpec spec = Bf16Matrix(4096);

  constexpr int kThreads = 16;
  std::latch start(kThreads);
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(spec);
      ok[t] = map.ok() && SameBytes(*map, Fingerprint(spec));
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(fake.calls(), 1);
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(ok[t]) << t;
  EXPECT_EQ(pool.counters().encodes, 1u);
  EXPECT_EQ(pool.counters().reuses, static_cast<uint64_t>(kThreads - 1));
}

TEST(DescriptorPoolTest, SixteenThreadsManySpecsEncodeEachOnce) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder());
  constexpr int kThreads = 16;
  constexpr int kSpecs = 17;
  constexpr int kRequestsPerThread = 500;

  std::latch start(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + t);
      start.arrive_and_wait();
      for (int i = 0; i < kRequestsPerThread; ++i) {
        const TensorMapSpec spec = Bf16Matrix(1 + rng() % kSpecs);
        absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(spec);
        if (!map.ok() || !SameBytes(*map, Fingerprint(spec))) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(fake.MaxCallsForOneSpec(), 1);
  EXPECT_EQ(pool.counters().encodes + pool.counters().reuses,
            static_cast<uint64_t>(kThreads * kRequestsPerThread));
  EXPECT_LE(pool.size(), static_cast<size_t>(kSpecs));
  EXPECT_EQ(pool.counters().encodes, pool.size());
}

// Sixteen threads over more specs than the pool holds: lookups and
// evictions interleave, and every caller still gets its own spec's bytes.
TEST(DescriptorPoolTest, SixteenThreadsEvictingNeverSeeAnotherSpecsBytes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  FakeEncoder fake;
  DescriptorPool pool(kHopper, fake.AsEncoder(), /*capacity=*/4);
  constexpr int kThreads = 16;
  constexpr int kSpecs = 9;
  constexpr int kRequestsPerThread = 2000;
  std::latch start(kThreads);
  std::atomic<int> failures{0};
  std::atomic<size_t> largest{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + t);
      start.arrive_and_wait();
      for (int i = 0; i < kRequestsPerThread; ++i) {
        const TensorMapSpec spec = Bf16Matrix(1 + rng() % kSpecs);
        absl::StatusOr<TensorMapBytes> map = pool.GetOrEncode(spec);
        if (!map.ok() || !SameBytes(*map, Fingerprint(spec))) ++failures;
        size_t size = pool.size(), seen = largest.load();
        while (size > seen && !largest.compare_exchange_weak(seen, size)) {
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(largest.load(), 4u);
  const DescriptorPoolCounters c = pool.counters();
  EXPECT_EQ(c.encodes + c.reuses,
            static_cast<uint64_t>(kThreads * kRequestsPerThread));
  EXPECT_EQ(c.encodes - c.evictions, pool.size());
}

}  // namespace
}  // namespace tailor::cuda
