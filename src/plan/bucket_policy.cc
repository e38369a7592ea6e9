// plan/bucket_policy.cc — see bucket_policy.h.
#include "plan/bucket_policy.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tailor/status.h"

namespace tailor::plan {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// The largest power of two an int64 holds.
constexpr int64_t kLargestPowerOfTwo = int64_t{1} << 62;

absl::Status CheckSize(int64_t n) {
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n: must be >= 1, got ", n));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> CheckId(int64_t id, int64_t n,
                                const BucketPolicy& policy) {
  if (id > kInt32Max) {
    return absl::OutOfRangeError(absl::StrCat("n: bucket id of ", n, " under ",
                                              policy.ToString(),
                                              " must fit int32, got ", id));
  }
  return static_cast<int32_t>(id);
}

// Index of the first entry of a list policy that is >= n (n >= 1).
absl::StatusOr<int32_t> ListIndex(int64_t n, const BucketPolicy& policy) {
  absl::Span<const int64_t> sizes = policy.sizes();
  auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  if (it == sizes.end()) {
    return absl::OutOfRangeError(absl::StrCat(
        "n: must be <= the last entry of ", policy.ToString(), ", got ", n));
  }
  // List() caps the entry count at kMaxListEntries, so the index fits.
  return static_cast<int32_t>(it - sizes.begin());
}

}  // namespace

BucketPolicy BucketPolicy::Exact() { return BucketPolicy(Kind::kExact, 1, {}); }

BucketPolicy BucketPolicy::NextPowerOfTwo() {
  return BucketPolicy(Kind::kNextPowerOfTwo, 1, {});
}

absl::StatusOr<BucketPolicy> BucketPolicy::MultipleOf(int64_t quantum) {
  if (quantum < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantum: must be >= 1, got ", quantum));
  }
  return BucketPolicy(Kind::kMultipleOf, quantum, {});
}

absl::StatusOr<BucketPolicy> BucketPolicy::List(
    absl::Span<const int64_t> sizes) {
  if (sizes.empty()) {
    return absl::InvalidArgumentError("sizes: must not be empty");
  }
  if (static_cast<int64_t>(sizes.size()) > kMaxListEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("sizes: must hold at most ", kMaxListEntries,
                     " entries, got ", sizes.size()));
  }
  if (sizes[0] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sizes[0]: must be >= 1, got ", sizes[0]));
  }
  for (size_t i = 1; i < sizes.size(); ++i) {
    if (sizes[i] <= sizes[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sizes[", i, "]: must be > sizes[", i - 1, "] = ", sizes[i - 1],
          " (strictly increasing), got ", sizes[i]));
    }
  }
  return BucketPolicy(Kind::kList, 1,
                      std::vector<int64_t>(sizes.begin(), sizes.end()));
}

absl::StatusOr<int64_t> BucketPolicy::Bucket(int64_t n) const {
  TAILOR_RETURN_IF_ERROR(CheckSize(n));
  switch (kind_) {
    case Kind::kExact:
      return n;
    case Kind::kNextPowerOfTwo:
      if (n > kLargestPowerOfTwo) {
        return absl::OutOfRangeError(
            absl::StrCat("n: pow2 bucket of ", n,
                         " must fit int64 (n <= ", kLargestPowerOfTwo, ")"));
      }
      return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)));
    case Kind::kMultipleOf: {
      // ceil(n / q) * q. Not (n + q - 1) / q * q: n + q - 1 overflows for
      // buckets that still fit (q = 3e18, n = 5e18 pads to 6e18).
      const int64_t multiples = n / quantum_ + (n % quantum_ != 0 ? 1 : 0);
      int64_t bucket = 0;
      if (__builtin_mul_overflow(multiples, quantum_, &bucket)) {
        return absl::OutOfRangeError(absl::StrCat(
            "n: ", ToString(), " bucket of ", n, " must fit int64"));
      }
      return bucket;
    }
    case Kind::kList: {
      TAILOR_ASSIGN_OR_RETURN(int32_t index, ListIndex(n, *this));
      return sizes_[index];
    }
  }
  return absl::InternalError("BucketPolicy: unknown kind");
}

absl::StatusOr<int32_t> BucketPolicy::BucketId(int64_t n) const {
  if (kind_ == Kind::kList) {
    TAILOR_RETURN_IF_ERROR(CheckSize(n));
    return ListIndex(n, *this);
  }
  TAILOR_ASSIGN_OR_RETURN(int64_t bucket, Bucket(n));
  switch (kind_) {
    case Kind::kExact:
      return CheckId(bucket, n, *this);
    case Kind::kNextPowerOfTwo:
      return static_cast<int32_t>(
          std::countr_zero(static_cast<uint64_t>(bucket)));
    case Kind::kMultipleOf:
      return CheckId(bucket / quantum_, n, *this);
    case Kind::kList:
      break;  // handled above
  }
  return absl::InternalError("BucketPolicy: unknown kind");
}

std::string BucketPolicy::ToString() const {
  switch (kind_) {
    case Kind::kExact:
      return "exact";
    case Kind::kNextPowerOfTwo:
      return "pow2";
    case Kind::kMultipleOf:
      return absl::StrCat("multiple_of(", quantum_, ")");
    case Kind::kList:
      return absl::StrCat("list(", absl::StrJoin(sizes_, ","), ")");
  }
  return "unknown";
}

}  // namespace tailor::plan
