// Fuzzes plan::BucketPolicy: construction from any arguments, then Bucket()
// and BucketId() on sizes around every edge, checked against the table in
// bucket_policy.h: a bucket is >= n and is the smallest of its kind, buckets
// and ids are monotone in n, and two sizes share an id exactly when they
// share a bucket. Errors must carry the documented codes.
#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <vector>

#include "fuzz_input.h"
#include "plan/bucket_policy.h"

namespace tailor::plan {
namespace {

using fuzz::FuzzInput;

bool IsCode(const absl::Status& s, absl::StatusCode code) {
  return s.code() == code && !s.message().empty();
}

// Builds a policy of any kind from the input; nullopt when the arguments
// were (rightly) rejected.
std::optional<BucketPolicy> MakePolicy(FuzzInput& in) {
  switch (in.InRange(0, 3)) {
    case 0:
      return BucketPolicy::Exact();
    case 1:
      return BucketPolicy::NextPowerOfTwo();
    case 2: {
      int64_t quantum = in.Size(64);
      absl::StatusOr<BucketPolicy> p = BucketPolicy::MultipleOf(quantum);
      FUZZ_CHECK(p.ok() == (quantum >= 1)) << "quantum " << quantum;
      if (!p.ok()) {
        FUZZ_CHECK(IsCode(p.status(), absl::StatusCode::kInvalidArgument))
            << p.status();
        return std::nullopt;
      }
      FUZZ_CHECK(p->quantum() == quantum);
      return *p;
    }
    default: {
      std::vector<int64_t> sizes(in.InRange(0, 12));
      int64_t next = in.InRange(0, 3);
      for (int64_t& s : sizes) {
        s = in.OneIn(8) ? in.EdgeValue() : next;
        const int64_t step = in.InRange(1, 40);
        next = s > std::numeric_limits<int64_t>::max() - step ? s : s + step;
      }
      bool valid = !sizes.empty() && sizes[0] >= 1 &&
                   std::adjacent_find(sizes.begin(), sizes.end(),
                                      std::greater_equal<>()) == sizes.end();
      absl::StatusOr<BucketPolicy> p = BucketPolicy::List(sizes);
      FUZZ_CHECK(p.ok() == valid) << p.status();
      if (!p.ok()) {
        FUZZ_CHECK(IsCode(p.status(), absl::StatusCode::kInvalidArgument))
            << p.status();
        return std::nullopt;
      }
      return *p;
    }
  }
}

// The documented bucket of n >= 1, or nullopt where it is OutOfRange.
std::optional<int64_t> ExpectedBucket(const BucketPolicy& p, int64_t n) {
  switch (p.kind()) {
    case BucketPolicy::Kind::kExact:
      return n;
    case BucketPolicy::Kind::kNextPowerOfTwo:
      if (n > (int64_t{1} << 62)) return std::nullopt;
      return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)));
    case BucketPolicy::Kind::kMultipleOf: {
      const int64_t q = p.quantum();
      const int64_t whole = n / q + (n % q != 0 ? 1 : 0);
      int64_t bucket;
      if (__builtin_mul_overflow(whole, q, &bucket)) return std::nullopt;
      return bucket;
    }
    case BucketPolicy::Kind::kList: {
      auto it = std::lower_bound(p.sizes().begin(), p.sizes().end(), n);
      if (it == p.sizes().end()) return std::nullopt;
      return *it;
    }
  }
  return std::nullopt;
}

void CheckSize(const BucketPolicy& p, int64_t n) {
  absl::StatusOr<int64_t> bucket = p.Bucket(n);
  absl::StatusOr<int32_t> id = p.BucketId(n);
  if (n < 1) {
    FUZZ_CHECK(IsCode(bucket.status(), absl::StatusCode::kInvalidArgument))
        << p.ToString() << " n=" << n << ": " << bucket.status();
    FUZZ_CHECK(IsCode(id.status(), absl::StatusCode::kInvalidArgument))
        << p.ToString() << " n=" << n << ": " << id.status();
    return;
  }
  std::optional<int64_t> expected = ExpectedBucket(p, n);
  FUZZ_CHECK(bucket.ok() == expected.has_value())
      << p.ToString() << " n=" << n << ": " << bucket.status();
  if (!bucket.ok()) {
    FUZZ_CHECK(IsCode(bucket.status(), absl::StatusCode::kOutOfRange))
        << bucket.status();
    FUZZ_CHECK(!id.ok());
    return;
  }
  FUZZ_CHECK(*bucket == *expected)
      << p.ToString() << " n=" << n << ": " << *bucket << " vs " << *expected;
  FUZZ_CHECK(*bucket >= n);
  if (!id.ok()) {
    // Only the unbounded kinds run out of int32 ids.
    FUZZ_CHECK(IsCode(id.status(), absl::StatusCode::kOutOfRange))
        << id.status();
    FUZZ_CHECK(p.kind() == BucketPolicy::Kind::kExact ||
               p.kind() == BucketPolicy::Kind::kMultipleOf)
        << p.ToString() << " n=" << n;
    return;
  }
  FUZZ_CHECK(*id >= 0) << p.ToString() << " n=" << n;
}

// Monotone, and ids equal exactly when buckets are.
void CheckPair(const BucketPolicy& p, int64_t a, int64_t b) {
  if (a > b) std::swap(a, b);
  absl::StatusOr<int64_t> ba = p.Bucket(a), bb = p.Bucket(b);
  absl::StatusOr<int32_t> ia = p.BucketId(a), ib = p.BucketId(b);
  if (!ba.ok() || !bb.ok() || !ia.ok() || !ib.ok()) return;
  FUZZ_CHECK(*ba <= *bb) << p.ToString() << " " << a << " " << b;
  FUZZ_CHECK(*ia <= *ib) << p.ToString() << " " << a << " " << b;
  FUZZ_CHECK((*ba == *bb) == (*ia == *ib))
      << p.ToString() << " " << a << "->" << *ba << "/" << *ia << ", " << b
      << "->" << *bb << "/" << *ib;
}

}  // namespace
}  // namespace tailor::plan

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::plan;
  tailor::fuzz::FuzzInput in(data, size);
  std::optional<BucketPolicy> policy = MakePolicy(in);
  if (!policy) return 0;
  FUZZ_CHECK(!policy->ToString().empty());
  FUZZ_CHECK(*policy == *policy);
  while (!in.empty()) {
    int64_t a = in.Size(300), b = in.Size(300);
    CheckSize(*policy, a);
    CheckSize(*policy, b);
    CheckPair(*policy, a, b);
  }
  return 0;
}
