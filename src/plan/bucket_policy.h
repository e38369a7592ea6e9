// plan/bucket_policy.h — map a runtime size to a small, finite set of buckets.
//
// tailor never specializes a kernel on a raw ragged quantity (a token count,
// a sequence length, the size of a tail piece). It first maps the quantity to
// a *bucket*: a padded size from a small set, named by a dense *bucket id*.
// Only bucket ids and the tail classes derived from them reach kernel keys.
//
// A BucketPolicy is one of four kinds:
//
//   kind              Bucket(n)          BucketId(n)    ToString()
//   exact             n                  n              "exact"
//   next power of 2   smallest 2^k >= n  k              "pow2"
//   multiple of q     smallest multiple  Bucket(n) / q  "multiple_of(16)"
//                     of q >= n
//   list s_0<...<s_m  first s_i >= n     i              "list(1,2,4,8)"
//
// Every kind maps n in [1, ...) and rejects n < 1 (InvalidArgument). Results
// that cannot be represented are OutOfRange: n above a list's last entry, a
// padded size past int64, an id past int32.
//
// Bucket() and BucketId() never allocate (except to build an error message);
// the list kind holds its entries in a vector built once by List().
//
// Example:
//   tailor::plan::BucketPolicy policy =
//       tailor::plan::BucketPolicy::NextPowerOfTwo();
//   absl::StatusOr<int64_t> padded = policy.Bucket(37);  // 64
//   absl::StatusOr<int32_t> id = policy.BucketId(37);    // 6
//
//   TAILOR_ASSIGN_OR_RETURN(auto batch, BucketPolicy::List({1, 2, 4, 8, 16}));
//   batch.Bucket(5);    // 8
//   batch.BucketId(5);  // 3
//   batch.Bucket(17);   // OutOfRange: above the last entry
#ifndef TAILOR_PLAN_BUCKET_POLICY_H_
#define TAILOR_PLAN_BUCKET_POLICY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tailor::plan {

class BucketPolicy {
 public:
  // Values are stable: they may be logged and compared across processes.
  enum class Kind : uint8_t {
    kExact = 0,
    kNextPowerOfTwo = 1,
    kMultipleOf = 2,
    kList = 3,
  };

  // Most entries List() accepts; keeps every list index a small int32 id.
  static constexpr int64_t kMaxListEntries = int64_t{1} << 20;

  // The default policy is exact, so that an aggregate holding a policy can
  // be value-initialized.
  BucketPolicy() = default;

  // Every n is its own bucket. Takes no argument, so it cannot fail.
  static BucketPolicy Exact();
  // Round up to the next power of two. Takes no argument, so it cannot fail.
  static BucketPolicy NextPowerOfTwo();
  // Round up to a multiple of `quantum`. InvalidArgument unless quantum >= 1.
  static absl::StatusOr<BucketPolicy> MultipleOf(int64_t quantum);
  // Round up to the first entry >= n. InvalidArgument unless `sizes` is
  // non-empty, holds at most kMaxListEntries entries, is strictly increasing
  // and its first entry is >= 1.
  static absl::StatusOr<BucketPolicy> List(absl::Span<const int64_t> sizes);

  // The padded size for n >= 1 (see the table above). Monotone in n.
  absl::StatusOr<int64_t> Bucket(int64_t n) const;
  // A small dense id for Bucket(n), fit for a kernel cache key. Two sizes get
  // the same id exactly when they get the same bucket. OutOfRange when the id
  // does not fit int32 (exact and multiple-of kinds with large n).
  absl::StatusOr<int32_t> BucketId(int64_t n) const;

  // "exact", "pow2", "multiple_of(16)", "list(1,2,4,8)".
  std::string ToString() const;

  Kind kind() const { return kind_; }
  // The quantum q of a multiple-of policy; 1 for the other kinds.
  int64_t quantum() const { return quantum_; }
  // The entries of a list policy; empty for the other kinds.
  absl::Span<const int64_t> sizes() const { return sizes_; }

  friend bool operator==(const BucketPolicy& a, const BucketPolicy& b) {
    return a.kind_ == b.kind_ && a.quantum_ == b.quantum_ &&
           a.sizes_ == b.sizes_;
  }

 private:
  BucketPolicy(Kind kind, int64_t quantum, std::vector<int64_t> sizes)
      : kind_(kind), quantum_(quantum), sizes_(std::move(sizes)) {}

  Kind kind_ = Kind::kExact;
  int64_t quantum_ = 1;
  std::vector<int64_t> sizes_;  // [num_entries], strictly increasing, list only
};

}  // namespace tailor::plan

#endif  // TAILOR_PLAN_BUCKET_POLICY_H_
