// tests/fuzz/fuzz_input.h — reading structured values out of a fuzzer's bytes.
//
// Every fuzz target turns its input into arguments with a FuzzInput: each
// Take*() consumes a few bytes from the front, and an exhausted input reads
// as zeros, so any byte string is a valid input and a short one means "the
// defaults": zero bytes always take the common path (OneIn() is false,
// Size() is in its typical range). Values are biased towards what finds bugs:
// small sizes, the edges of every documented range, and now and then anything
// at all.
//
// FUZZ_CHECK(cond) << "context" states a property of the code under test;
// when it does not hold the target prints the context and aborts, which
// libFuzzer (and tests/fuzz/fuzz_driver.cc) report as a crash with the input
// saved.
//
// Example:
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     tailor::fuzz::FuzzInput in(data, size);
//     int64_t n = in.Size(/*typical_max=*/64);
//     FUZZ_CHECK(Twice(n) == 2 * n) << "n=" << n;
//     return 0;
//   }
#ifndef TAILOR_TESTS_FUZZ_FUZZ_INPUT_H_
#define TAILOR_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

namespace tailor::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The next sizeof(T) bytes (little end first), zero-filled when short.
  template <typename T>
  T Take() {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    U value = 0;
    for (size_t i = 0; i < sizeof(T) && size_ > 0; ++i) {
      value |= static_cast<U>(*data_) << (8 * i);
      ++data_;
      --size_;
    }
    return static_cast<T>(value);
  }

  bool Bool() { return (Take<uint8_t>() & 1) != 0; }

  // True with probability about 1 / n (n >= 1); false on zero bytes.
  bool OneIn(uint32_t n) { return Take<uint8_t>() % n == n - 1; }

  // A value in [lo, hi] (lo <= hi).
  int64_t InRange(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    uint64_t raw = span <= 0xff     ? Take<uint8_t>()
                   : span <= 0xffff ? Take<uint16_t>()
                   : span <= ~0u    ? Take<uint32_t>()
                                    : Take<uint64_t>();
    if (span != std::numeric_limits<uint64_t>::max()) raw %= span + 1;
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + raw);
  }

  // Mostly in [0, typical_max]; sometimes an edge value (negative, around
  // powers of two, near the int32 and int64 limits) or any int64.
  int64_t Size(int64_t typical_max) {
    switch (Take<uint8_t>() % 16) {
      case 14:
        return EdgeValue();
      case 15:
        return Take<int64_t>();
      default:
        return InRange(0, typical_max);
    }
  }

  // An interesting boundary for 64-bit integer arithmetic.
  int64_t EdgeValue() {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    static constexpr int64_t kEdges[] = {0,
                                         1,
                                         -1,
                                         2,
                                         kInt32Max,
                                         kInt32Max + 1,
                                         int64_t{1} << 32,
                                         kMax,
                                         std::numeric_limits<int64_t>::min(),
                                         kMax / 2,
                                         int64_t{1} << 20,
                                         (int64_t{1} << 20) + 1,
                                         1 << 16,
                                         (1 << 16) + 1,
                                         int64_t{1} << 40,
                                         int64_t{1} << 62};
    int64_t edge = kEdges[Take<uint8_t>() % std::size(kEdges)];
    switch (Take<uint8_t>() % 4) {
      case 1:
        return edge == std::numeric_limits<int64_t>::min() ? edge : edge - 1;
      case 2:
        return edge == kMax ? edge : edge + 1;
      default:
        return edge;
    }
  }

  // One of `count` enumerators as its underlying value, or (rarely) any
  // value of the underlying type: out-of-range enums must be rejected too.
  template <typename E>
  E Enum(uint32_t count) {
    using U = std::underlying_type_t<E>;
    if (OneIn(16)) return static_cast<E>(Take<U>());
    return static_cast<E>(InRange(0, count - 1));
  }

  // Up to `max` raw bytes.
  std::string Bytes(size_t max) {
    size_t n = static_cast<size_t>(InRange(0, static_cast<int64_t>(max)));
    n = n < size_ ? n : size_;
    std::string out(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return out;
  }

  // Everything left.
  std::string Rest() { return Bytes(size_); }

 private:
  const uint8_t* data_;
  size_t size_;
};

// Collects a message and aborts on destruction: the failure path of
// FUZZ_CHECK.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": FUZZ_CHECK(" << condition
            << ") failed: ";
  }
  ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Turns `Voidify() & stream` into a void expression (glog's trick), so that
// FUZZ_CHECK is one expression and nests in an unbraced if.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace tailor::fuzz

#define FUZZ_CHECK(condition)                                            \
  (condition)                                                            \
      ? static_cast<void>(0)                                             \
      : ::tailor::fuzz::Voidify() &                                      \
            ::tailor::fuzz::CheckFailure(__FILE__, __LINE__, #condition) \
                .stream()

#endif  // TAILOR_TESTS_FUZZ_FUZZ_INPUT_H_
