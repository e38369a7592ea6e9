// tests/plan/bucket_policy_test.cc — BucketPolicy: goldens, errors, and a
// property sweep against naive reference buckets.
#include "plan/bucket_policy.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace tailor::plan {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

BucketPolicy MultipleOfOrDie(int64_t quantum) {
  absl::StatusOr<BucketPolicy> policy = BucketPolicy::MultipleOf(quantum);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *policy : BucketPolicy::Exact();
}

BucketPolicy ListOrDie(std::vector<int64_t> sizes) {
  absl::StatusOr<BucketPolicy> policy = BucketPolicy::List(sizes);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *policy : BucketPolicy::Exact();
}

// n, expected bucket, expected id.
struct Golden {
  int64_t n;
  int64_t bucket;
  int32_t id;
};

void ExpectGoldens(const BucketPolicy& policy,
                   const std::vector<Golden>& goldens) {
  for (const Golden& golden : goldens) {
    SCOPED_TRACE(policy.ToString() + " n=" + std::to_string(golden.n));
    absl::StatusOr<int64_t> bucket = policy.Bucket(golden.n);
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    EXPECT_EQ(*bucket, golden.bucket);
    absl::StatusOr<int32_t> id = policy.BucketId(golden.n);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, golden.id);
  }
}

TEST(BucketPolicyTest, ExactGoldens) {
  ExpectGoldens(BucketPolicy::Exact(), {{1, 1, 1},
                                        {2, 2, 2},
                                        {17, 17, 17},
                                        {577, 577, 577},
                                        {kInt32Max, kInt32Max, kInt32Max}});
  EXPECT_EQ(*BucketPolicy::Exact().Bucket(kInt64Max), kInt64Max);
}

TEST(BucketPolicyTest, NextPowerOfTwoGoldens) {
  ExpectGoldens(BucketPolicy::NextPowerOfTwo(),
                {{1, 1, 0},
                 {2, 2, 1},
                 {3, 4, 2},
                 {4, 4, 2},
                 {5, 8, 3},
                 {17, 32, 5},
                 {577, 1024, 10},
                 {kInt32Max, int64_t{1} << 31, 31},
                 {int64_t{1} << 62, int64_t{1} << 62, 62}});
}

TEST(BucketPolicyTest, MultipleOfGoldens) {
  ExpectGoldens(
      MultipleOfOrDie(16),
      {{1, 16, 1}, {15, 16, 1}, {16, 16, 1}, {17, 32, 2}, {577, 592, 37}});
  ExpectGoldens(MultipleOfOrDie(1), {{1, 1, 1}, {17, 17, 17}});
  ExpectGoldens(MultipleOfOrDie(7), {{1, 7, 1}, {7, 7, 1}, {8, 14, 2}});
  // The largest n whose bucket fits int64.
  const int64_t last = kInt64Max / 16 * 16;
  EXPECT_EQ(*MultipleOfOrDie(16).Bucket(last), last);
}

TEST(BucketPolicyTest, ListGoldens) {
  ExpectGoldens(ListOrDie({1, 2, 4, 8}),
                {{1, 1, 0}, {2, 2, 1}, {3, 4, 2}, {5, 8, 3}, {8, 8, 3}});
  // vLLM's CUDA-graph batch sizes start [1, 2, 4, 8, 16, 24, ...].
  ExpectGoldens(ListOrDie({1, 2, 4, 8, 16, 24, 32}),
                {{9, 16, 4}, {17, 24, 5}, {25, 32, 6}});
  ExpectGoldens(ListOrDie({577}), {{1, 577, 0}, {577, 577, 0}});
}

TEST(BucketPolicyTest, ToStringNamesKindAndArguments) {
  EXPECT_EQ(BucketPolicy::Exact().ToString(), "exact");
  EXPECT_EQ(BucketPolicy::NextPowerOfTwo().ToString(), "pow2");
  EXPECT_EQ(MultipleOfOrDie(16).ToString(), "multiple_of(16)");
  EXPECT_EQ(ListOrDie({1, 2, 4, 8}).ToString(), "list(1,2,4,8)");
  EXPECT_EQ(ListOrDie({3}).ToString(), "list(3)");
}

TEST(BucketPolicyTest, AccessorsAndEquality) {
  EXPECT_EQ(BucketPolicy(), BucketPolicy::Exact());
  EXPECT_EQ(BucketPolicy().kind(), BucketPolicy::Kind::kExact);
  EXPECT_EQ(MultipleOfOrDie(8).kind(), BucketPolicy::Kind::kMultipleOf);
  EXPECT_EQ(MultipleOfOrDie(8).quantum(), 8);
  EXPECT_THAT(ListOrDie({2, 5}).sizes(), ::testing::ElementsAre(2, 5));
  EXPECT_EQ(MultipleOfOrDie(8), MultipleOfOrDie(8));
  EXPECT_FALSE(MultipleOfOrDie(8) == MultipleOfOrDie(16));
  EXPECT_FALSE(MultipleOfOrDie(1) == BucketPolicy::Exact());
  EXPECT_FALSE(BucketPolicy::NextPowerOfTwo() == BucketPolicy::Exact());
  EXPECT_EQ(ListOrDie({1, 4}), ListOrDie({1, 4}));
  EXPECT_FALSE(ListOrDie({1, 4}) == ListOrDie({1, 4, 8}));
  EXPECT_FALSE(ListOrDie({1, 4}) == ListOrDie({2, 4}));
}

TEST(BucketPolicyTest, FactoriesRejectBadArguments) {
  EXPECT_THAT(BucketPolicy::MultipleOf(0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("quantum: must be >= 1, got 0")));
  EXPECT_THAT(BucketPolicy::MultipleOf(-16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("quantum: must be >= 1, got -16")));
  EXPECT_THAT(BucketPolicy::List({}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sizes: must not be empty")));
  EXPECT_THAT(BucketPolicy::List({0, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sizes[0]: must be >= 1, got 0")));
  EXPECT_THAT(BucketPolicy::List({-4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sizes[0]: must be >= 1, got -4")));
  EXPECT_THAT(BucketPolicy::List({1, 4, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sizes[2]: must be > sizes[1] = 4 (strictly "
                                 "increasing), got 4")));
  EXPECT_THAT(BucketPolicy::List({1, 8, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sizes[2]: must be > sizes[1] = 8")));
  std::vector<int64_t> too_many(BucketPolicy::kMaxListEntries + 1);
  for (size_t i = 0; i < too_many.size(); ++i) too_many[i] = i + 1;
  EXPECT_THAT(BucketPolicy::List(too_many),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sizes: must hold at most 1048576 entries, "
                                 "got 1048577")));
}

TEST(BucketPolicyTest, NonPositiveSizesAreInvalidForEveryKind) {
  for (const BucketPolicy& policy :
       {BucketPolicy::Exact(), BucketPolicy::NextPowerOfTwo(),
        MultipleOfOrDie(16), ListOrDie({1, 2})}) {
    SCOPED_TRACE(policy.ToString());
    EXPECT_THAT(policy.Bucket(0),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("n: must be >= 1, got 0")));
    EXPECT_THAT(policy.BucketId(0),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("n: must be >= 1, got 0")));
    EXPECT_THAT(policy.Bucket(-5),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("n: must be >= 1, got -5")));
  }
}

TEST(BucketPolicyTest, UnrepresentableResultsAreOutOfRange) {
  const BucketPolicy list = ListOrDie({1, 2, 4, 8});
  EXPECT_THAT(list.Bucket(9),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("n: must be <= the last entry of "
                                 "list(1,2,4,8), got 9")));
  EXPECT_THAT(list.BucketId(9),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("n: must be <= the last entry of "
                                 "list(1,2,4,8), got 9")));
  EXPECT_THAT(
      BucketPolicy::NextPowerOfTwo().Bucket((int64_t{1} << 62) + 1),
      StatusIs(absl::StatusCode::kOutOfRange,
               HasSubstr("n: pow2 bucket of 4611686018427387905 must fit "
                         "int64 (n <= 4611686018427387904)")));
  EXPECT_THAT(MultipleOfOrDie(16).Bucket(kInt64Max),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("n: multiple_of(16) bucket of "
                                 "9223372036854775807 must fit int64")));
  EXPECT_THAT(BucketPolicy::Exact().BucketId(kInt32Max + 1),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("n: bucket id of 2147483648 under exact must "
                                 "fit int32, got 2147483648")));
  EXPECT_THAT(MultipleOfOrDie(2).BucketId(2 * (kInt32Max + 1)),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("under multiple_of(2) must fit int32, got "
                                 "2147483648")));
  EXPECT_EQ(*MultipleOfOrDie(2).BucketId(2 * kInt32Max), kInt32Max);
}

// Found by bucket_policy_fuzz: large quanta whose buckets fit int64 were
// OutOfRange, because the rounding computed n + q - 1 first.
TEST(BucketPolicyTest, LargeQuantaRoundWithoutOverflow) {
  const int64_t q = 3776486808823900092;
  EXPECT_EQ(*MultipleOfOrDie(q).Bucket(5694892738037769679), 2 * q);
  EXPECT_EQ(*MultipleOfOrDie(q).BucketId(5694892738037769679), 2);
  EXPECT_EQ(*MultipleOfOrDie(kInt64Max).Bucket(kInt64Max), kInt64Max);
  EXPECT_EQ(*MultipleOfOrDie(kInt64Max - 1).Bucket(2), kInt64Max - 1);
  EXPECT_THAT(MultipleOfOrDie(kInt64Max - 1).Bucket(kInt64Max),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("must fit int64")));
}

// ---------------------------------------------------------------------------
// Property sweep: Bucket and BucketId against naive references.
// ---------------------------------------------------------------------------

// The smallest member of the policy's bucket set that is >= n, by brute
// force; -1 when there is none.
int64_t ReferenceBucket(const BucketPolicy& policy, int64_t n) {
  switch (policy.kind()) {
    case BucketPolicy::Kind::kExact:
      return n;
    case BucketPolicy::Kind::kNextPowerOfTwo: {
      int64_t power = 1;
      while (power < n) power *= 2;
      return power;
    }
    case BucketPolicy::Kind::kMultipleOf: {
      const int64_t q = policy.quantum();
      return n % q == 0 ? n : n + (q - n % q);
    }
    case BucketPolicy::Kind::kList:
      for (int64_t size : policy.sizes()) {
        if (size >= n) return size;
      }
      return -1;
  }
  return -1;
}

// The size a bucket id names, inverting BucketId.
int64_t SizeOfId(const BucketPolicy& policy, int32_t id) {
  switch (policy.kind()) {
    case BucketPolicy::Kind::kExact:
      return id;
    case BucketPolicy::Kind::kNextPowerOfTwo:
      return int64_t{1} << id;
    case BucketPolicy::Kind::kMultipleOf:
      return int64_t{id} * policy.quantum();
    case BucketPolicy::Kind::kList:
      return policy.sizes()[id];
  }
  return -1;
}

BucketPolicy RandomPolicy(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return BucketPolicy::Exact();
    case 1:
      return BucketPolicy::NextPowerOfTwo();
    case 2:
      return MultipleOfOrDie(1 + rng() % 200);
    default: {
      std::vector<int64_t> sizes;
      int64_t size = 0;
      const int entries = 1 + rng() % 40;
      for (int i = 0; i < entries; ++i) {
        size += 1 + rng() % 100;
        sizes.push_back(size);
      }
      return ListOrDie(sizes);
    }
  }
}

TEST(BucketPolicyTest, RandomSizesMatchReference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const BucketPolicy policy = RandomPolicy(rng);
    SCOPED_TRACE(policy.ToString());
    int64_t previous_bucket = 0;
    int32_t previous_id = -1;
    // Ascending n, to check monotonicity and "same id iff same bucket".
    const int64_t limit = 1 + rng() % 5000;
    for (int64_t n = 1; n <= limit; n += 1 + rng() % 7) {
      const int64_t expected = ReferenceBucket(policy, n);
      absl::StatusOr<int64_t> bucket = policy.Bucket(n);
      absl::StatusOr<int32_t> id = policy.BucketId(n);
      if (expected < 0) {
        ASSERT_EQ(bucket.status().code(), absl::StatusCode::kOutOfRange);
        ASSERT_EQ(id.status().code(), absl::StatusCode::kOutOfRange);
        continue;
      }
      ASSERT_TRUE(bucket.ok()) << "n=" << n << " " << bucket.status();
      ASSERT_TRUE(id.ok()) << "n=" << n << " " << id.status();
      ASSERT_EQ(*bucket, expected) << "n=" << n;
      ASSERT_EQ(SizeOfId(policy, *id), *bucket) << "n=" << n;
      ASSERT_GE(*bucket, previous_bucket) << "n=" << n;
      ASSERT_EQ(*bucket == previous_bucket, *id == previous_id) << "n=" << n;
      previous_bucket = *bucket;
      previous_id = *id;
    }
  }
}

TEST(BucketPolicyTest, LargeSizesMatchReference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    const BucketPolicy policy = trial % 3 == 0 ? BucketPolicy::Exact()
                                : trial % 3 == 1
                                    ? BucketPolicy::NextPowerOfTwo()
                                    : MultipleOfOrDie(1 + rng() % 100000);
    // Log-uniform n in [1, 2^62].
    const int64_t n = 1 + static_cast<int64_t>(rng() >> (2 + rng() % 62));
    SCOPED_TRACE(policy.ToString() + " n=" + std::to_string(n));
    absl::StatusOr<int64_t> bucket = policy.Bucket(n);
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    ASSERT_EQ(*bucket, ReferenceBucket(policy, n));
    absl::StatusOr<int32_t> id = policy.BucketId(n);
    const bool id_fits = policy.kind() == BucketPolicy::Kind::kNextPowerOfTwo ||
                         *bucket / policy.quantum() <= kInt32Max;
    if (id_fits) {
      ASSERT_TRUE(id.ok()) << id.status();
      ASSERT_EQ(SizeOfId(policy, *id), *bucket);
    } else {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kOutOfRange);
    }
  }
}

}  // namespace
}  // namespace tailor::plan
