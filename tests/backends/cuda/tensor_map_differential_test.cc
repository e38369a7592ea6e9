// GPU differential test (label gpu): CheckTensorMap against the real
// cuTensorMapEncodeTiled on random specs that sit on, and just past, every
// documented boundary. 100% agreement on accept/reject is required.
//
// Needs a CUDA 12.0+ driver and an sm_90+ device; skips itself otherwise
// ("no CUDA driver: ..."). The seed is random and printed; set
// TAILOR_TEST_SEED=<n> to replay one run.
//
// Global addresses: the encode does not dereference globalAddress but checks
// its alignment, so the test takes a real 1 MiB device allocation as the base
// (in case a driver ever validates the pointer) and adds offsets to it. Specs
// whose extent exceeds the allocation are fine: no copy is ever issued.
//
// The checker is stricter than the driver on purpose in three rules, and the
// test tolerates "checker rejects, driver accepts" there (counted apart):
//   interleave_swizzle — documented in cuda.h, not enforced by driver 580;
//   arch_swizzle_atom, arch_packed_type — hardware support (PTX ISA); driver
//     580 does reject them on an H100, another driver might not.
// Every other difference, either way, is a disagreement.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/driver_api.h"
#include "backends/cuda/tma/tensor_map_check.h"
#include "backends/cuda/tma/tensor_map_driver_encoder.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "gtest/gtest.h"

namespace tailor::cuda {
namespace {

constexpr int kSpecCount = 20000;
constexpr int kMaxPrintedDisagreements = 25;
constexpr uint64_t kAllocationBytes = 1 << 20;
constexpr uint64_t kStrideLimit = uint64_t{1} << 40;
constexpr uint64_t kDimLimit = uint64_t{1} << 32;

// ---------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Uniform(uint64_t lo, uint64_t hi) {  // inclusive
    return std::uniform_int_distribution<uint64_t>(lo, hi)(engine_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(engine_); }
  template <typename T>
  T Pick(const std::vector<T>& values) {
    return values[Uniform(0, values.size() - 1)];
  }

 private:
  std::mt19937_64 engine_;
};

uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

bool IsAlign16B(TensorMapDataType t) {
  return t == TensorMapDataType::k16U4Align16B ||
         t == TensorMapDataType::k16U6Align16B;
}

uint64_t StrideAlignment(const TensorMapSpec& s) {
  return s.interleave == TensorMapInterleave::k32B || IsAlign16B(s.data_type)
             ? 32
             : 16;
}

uint64_t SwizzleSpan(TensorMapSwizzle s) {
  switch (s) {
    case TensorMapSwizzle::kNone:
      return 0;
    case TensorMapSwizzle::k32B:
      return 32;
    case TensorMapSwizzle::k64B:
      return 64;
    default:
      return 128;
  }
}

// ---------------------------------------------------------------------------
// A valid spec (per the checker's reading of cuda.h), every entry filled
// ---------------------------------------------------------------------------

class SpecGenerator {
 public:
  SpecGenerator(uint64_t seed, uint64_t base_address, uint64_t box_limit)
      : rng_(seed), base_address_(base_address), box_limit_(box_limit) {}

  TensorMapSpec ValidSpec() {
    TensorMapSpec s;
    s.data_type = PickDataType();
    s.interleave = PickInterleave(s.data_type);
    s.rank = static_cast<uint32_t>(
        rng_.Uniform(s.interleave == TensorMapInterleave::kNone ? 1 : 3, 5));
    s.swizzle = PickSwizzle(s);
    FillBoxes(s);
    ShrinkBoxToFit(s);
    FillDims(s);
    FillStrides(s);
    s.global_address = base_address_ + StrideAlignment(s) * rng_.Uniform(0, 64);
    s.l2_promotion = static_cast<TensorMapL2Promotion>(rng_.Uniform(0, 3));
    if (IsFloatTensorMapType(s.data_type) && rng_.Chance(0.3)) {
      s.oob_fill = TensorMapOobFill::kNanRequestZeroFma;
    }
    return s;
  }

  Rng& rng() { return rng_; }

 private:
  TensorMapDataType PickDataType() {
    if (rng_.Chance(0.2)) {
      return static_cast<TensorMapDataType>(rng_.Uniform(13, 15));  // packed
    }
    return static_cast<TensorMapDataType>(rng_.Uniform(0, 12));
  }

  TensorMapInterleave PickInterleave(TensorMapDataType t) {
    if (t == TensorMapDataType::k16U6Align16B || rng_.Chance(0.7)) {
      return TensorMapInterleave::kNone;
    }
    return rng_.Chance(0.5) ? TensorMapInterleave::k16B
                            : TensorMapInterleave::k32B;
  }

  TensorMapSwizzle PickSwizzle(const TensorMapSpec& s) {
    if (s.interleave == TensorMapInterleave::k32B)
      return TensorMapSwizzle::k32B;
    if (IsAlign16B(s.data_type)) {
      std::vector<TensorMapSwizzle> allowed = {TensorMapSwizzle::kNone,
                                               TensorMapSwizzle::k128B,
                                               TensorMapSwizzle::k128BAtom32B};
      if (s.data_type == TensorMapDataType::k16U6Align16B) {
        allowed.push_back(TensorMapSwizzle::k128BAtom64B);
      }
      return rng_.Pick(allowed);
    }
    if (rng_.Chance(0.15)) {
      return static_cast<TensorMapSwizzle>(rng_.Uniform(4, 6));  // atoms
    }
    return static_cast<TensorMapSwizzle>(rng_.Uniform(0, 3));
  }

  uint32_t OuterBox() {
    if (rng_.Chance(0.5)) return 1u << rng_.Uniform(0, 8);
    return static_cast<uint32_t>(rng_.Uniform(1, 256));
  }

  void FillBoxes(TensorMapSpec& s) {
    const uint64_t bits = TensorMapElementBits(s.data_type);
    for (int i = 1; i < kTensorMapMaxRank; ++i) {
      s.box_dims[i] = OuterBox();
      s.element_strides[i] =
          rng_.Chance(0.8) ? 1 : static_cast<uint32_t>(rng_.Uniform(1, 8));
    }
    s.element_strides[0] =
        rng_.Chance(0.9) ? 1 : static_cast<uint32_t>(rng_.Uniform(1, 8));
    if (IsAlign16B(s.data_type)) {
      s.box_dims[0] = 128;
    } else if (s.interleave == TensorMapInterleave::kNone) {
      // A whole number of 16-byte chunks, within the swizzle span.
      const uint64_t span = SwizzleSpan(s.swizzle);
      const uint64_t max_bytes =
          std::min<uint64_t>(span == 0 ? 4096 : span, 256 * bits / 8);
      const uint64_t bytes = 16 * rng_.Uniform(1, max_bytes / 16);
      s.box_dims[0] = static_cast<uint32_t>(bytes * 8 / bits);
    } else {
      const uint64_t chunk =
          s.interleave == TensorMapInterleave::k16B ? 16 : 32;
      s.box_dims[0] = rng_.Chance(0.75)
                          ? static_cast<uint32_t>(chunk * 8 / bits)
                          : static_cast<uint32_t>(rng_.Uniform(1, 256));
    }
  }

  void FillDims(TensorMapSpec& s) {
    if (IsAlign16B(s.data_type)) {
      s.global_dims[0] = 128 * rng_.Uniform(1, 64);
    } else if (s.data_type == TensorMapDataType::k16U4Align8B) {
      s.global_dims[0] = 2 * rng_.Uniform(1, 4096);
    } else if (rng_.Chance(0.2)) {
      s.global_dims[0] = s.box_dims[0];  // box exactly covers the row
    } else {
      s.global_dims[0] = rng_.Uniform(1, 8192);
    }
    for (int i = 1; i < kTensorMapMaxRank; ++i) {
      s.global_dims[i] =
          rng_.Chance(0.3) ? s.box_dims[i] : rng_.Uniform(1, 1024);
    }
  }

  // Natural (nested, padded) strides most of the time; otherwise free
  // strides that keep only the documented rules, to probe undocumented ones.
  void FillStrides(TensorMapSpec& s) {
    const uint64_t align = StrideAlignment(s);
    const uint64_t bits = TensorMapElementBits(s.data_type);
    const bool natural = rng_.Chance(0.7);
    uint64_t stride = RoundUp((s.global_dims[0] * bits + 7) / 8, align) +
                      align * rng_.Uniform(0, 2);
    for (int i = 0; i + 1 < kTensorMapMaxRank; ++i) {
      if (natural) {
        if (i > 0) {
          const uint64_t max_dim =
              std::max<uint64_t>(1, (kStrideLimit / 4) / stride);
          s.global_dims[i] = std::min(s.global_dims[i], max_dim);
          stride = stride * s.global_dims[i] + align * rng_.Uniform(0, 1);
        }
      } else {
        const uint64_t lo =
            std::max<uint64_t>(1, (s.global_dims[i] + align - 1) / align);
        stride = align * rng_.Uniform(lo, uint64_t{1} << 20);
      }
      s.global_strides[i] = stride;
    }
  }

  // Halves the largest outer box dim until the box fits in shared memory.
  void ShrinkBoxToFit(TensorMapSpec& s) {
    const uint64_t bits = std::max(TensorMapElementBits(s.data_type), 4);
    auto bytes = [&] {
      uint64_t b = bits;
      for (uint32_t i = 0; i < s.rank; ++i) {
        b *= s.box_dims[i] / s.element_strides[i];
      }
      return b / 8;
    };
    while (s.rank > 1 && bytes() > box_limit_) {
      auto largest =
          std::max_element(s.box_dims.begin() + 1, s.box_dims.begin() + s.rank);
      *largest = std::max<uint32_t>(1, *largest / 2);
    }
  }

  Rng rng_;
  uint64_t base_address_;
  uint64_t box_limit_;
};

// ---------------------------------------------------------------------------
// Boundary probes: push one field onto or just past one documented limit
// ---------------------------------------------------------------------------

uint32_t PickDim(Rng& rng, const TensorMapSpec& s) {
  const uint32_t rank = std::clamp<uint32_t>(s.rank, 1, kTensorMapMaxRank);
  return static_cast<uint32_t>(rng.Uniform(0, rank - 1));
}

void ProbeEnum(Rng& rng, TensorMapSpec& s) {
  const bool past = rng.Chance(0.5);
  switch (rng.Uniform(0, 4)) {
    case 0:
      s.data_type = static_cast<TensorMapDataType>(past ? 16 : 15);
      break;
    case 1:
      s.interleave = static_cast<TensorMapInterleave>(past ? 3 : 2);
      break;
    case 2:
      s.swizzle = static_cast<TensorMapSwizzle>(past ? 7 : 6);
      break;
    case 3:
      s.l2_promotion = static_cast<TensorMapL2Promotion>(past ? 4 : 3);
      break;
    default:
      s.oob_fill = static_cast<TensorMapOobFill>(past ? 2 : 1);
      break;
  }
}

void ProbeRankAndAddress(Rng& rng, TensorMapSpec& s) {
  if (rng.Chance(0.5)) {
    s.rank = static_cast<uint32_t>(rng.Pick<uint64_t>({0, 1, 2, 3, 5, 6}));
    return;
  }
  const uint64_t align = StrideAlignment(s);
  const uint64_t base = s.global_address / align * align;
  s.global_address =
      base + rng.Pick<uint64_t>({0, align, align / 2, 16, 8, 4, 1});
}

void ProbeGlobalDim(Rng& rng, TensorMapSpec& s) {
  const uint32_t i = PickDim(rng, s);
  if (i == 0 && IsPackedTensorMapType(s.data_type) && rng.Chance(0.5)) {
    const uint64_t m = IsAlign16B(s.data_type) ? 128 : 2;
    s.global_dims[0] =
        m * rng.Uniform(1, 8) + rng.Pick<uint64_t>({0, 1, m / 2});
    return;
  }
  s.global_dims[i] =
      rng.Pick<uint64_t>({1, 0, kDimLimit, kDimLimit + 1, kDimLimit - 1});
}

void ProbeGlobalStride(Rng& rng, TensorMapSpec& s) {
  if (s.rank < 2) return;
  const uint32_t i = static_cast<uint32_t>(rng.Uniform(0, s.rank - 2));
  const uint64_t align = StrideAlignment(s);
  switch (rng.Uniform(0, 4)) {
    case 0:  // alignment
      s.global_strides[i] = RoundUp(s.global_strides[i], align) +
                            rng.Pick<uint64_t>({0, 16, 8, 1});
      break;
    case 1:  // < 2^40
      s.global_strides[i] = rng.Pick<uint64_t>(
          {kStrideLimit - align, kStrideLimit, kStrideLimit + align});
      break;
    case 2:  // cuda.h's assert(globalStrides[i] >= globalDim[i])
      s.global_strides[i] =
          RoundUp(std::max<uint64_t>(s.global_dims[i], 1), align);
      s.global_dims[i] = s.global_strides[i] + (rng.Chance(0.5) ? 1 : 0);
      break;
    case 3:  // a zero stride (broadcast)
      s.global_strides[i] = 0;
      break;
    default:  // rows closer than their own bytes (overlap)
      s.global_strides[i] = align;
      break;
  }
}

void ProbeBox(Rng& rng, TensorMapSpec& s) {
  const uint64_t bits = std::max(TensorMapElementBits(s.data_type), 4);
  const uint32_t i = PickDim(rng, s);
  switch (rng.Uniform(0, 4)) {
    case 0:
      s.box_dims[i] = rng.Pick<uint32_t>({1, 0, 256, 257});
      break;
    case 1: {  // inner bytes: a multiple of 16, or one element off
      const uint64_t elems_per_16 = std::max<uint64_t>(1, 128 / bits);
      const uint64_t on = elems_per_16 * rng.Uniform(1, 4);
      s.box_dims[0] = static_cast<uint32_t>(on + rng.Pick<uint64_t>({0, 1}));
      break;
    }
    case 2: {  // swizzle span: exactly full, or one 16-byte chunk more
      const uint64_t span = std::max<uint64_t>(SwizzleSpan(s.swizzle), 32);
      const uint64_t bytes = span + (rng.Chance(0.5) ? 16 : 0);
      s.box_dims[0] = static_cast<uint32_t>(bytes * 8 / bits);
      break;
    }
    case 3:  // packed: exactly 128, or not
      s.box_dims[0] = rng.Pick<uint32_t>({128, 64, 256, 127});
      break;
    default:  // larger than the tensor (undocumented either way)
      s.box_dims[i] =
          static_cast<uint32_t>(std::min<uint64_t>(256, s.global_dims[i] + 1));
      break;
  }
}

void ProbeElementStride(Rng& rng, TensorMapSpec& s) {
  const uint32_t i = rng.Chance(0.3) ? 0 : PickDim(rng, s);
  s.element_strides[i] = rng.Pick<uint32_t>({1, 8, 0, 9});
}

void ProbeLayoutCombos(Rng& rng, TensorMapSpec& s) {
  switch (rng.Uniform(0, 4)) {
    case 0:
      s.interleave = TensorMapInterleave::k32B;
      s.swizzle = static_cast<TensorMapSwizzle>(rng.Uniform(0, 6));
      break;
    case 1:
      s.interleave = static_cast<TensorMapInterleave>(rng.Uniform(0, 2));
      break;
    case 2:
      s.swizzle = static_cast<TensorMapSwizzle>(rng.Uniform(0, 6));
      break;
    case 3:
      s.oob_fill = TensorMapOobFill::kNanRequestZeroFma;
      break;
    default:
      s.data_type = static_cast<TensorMapDataType>(rng.Uniform(0, 15));
      break;
  }
}

// Bytes of the box as the driver counts them: floor(box / elementStrides).
uint64_t DriverBoxBytes(const TensorMapSpec& s) {
  uint64_t bytes = std::max(TensorMapElementBits(s.data_type), 4);
  const uint32_t rank = std::clamp<uint32_t>(s.rank, 1, kTensorMapMaxRank);
  for (uint32_t i = 0; i < rank; ++i) {
    bytes *= s.box_dims[i] / std::max<uint32_t>(s.element_strides[i], 1);
  }
  return bytes / 8;
}

// Scales one outer box dim so the box sits exactly on, or just past, the
// shared-memory limit (the driver's undocumented kBoxBytes rule).
void ProbeBoxBytes(Rng& rng, TensorMapSpec& s, uint64_t limit) {
  if (s.rank < 2 || s.rank > kTensorMapMaxRank) return;
  const uint32_t j = static_cast<uint32_t>(rng.Uniform(1, s.rank - 1));
  const uint32_t es = std::clamp<uint32_t>(s.element_strides[j], 1, 8);
  s.element_strides[j] = es;
  s.box_dims[j] = es;  // one counted element in dimension j
  const uint64_t per_element = DriverBoxBytes(s);
  if (per_element == 0) return;
  const uint64_t fit = limit / per_element;
  const uint64_t box =
      rng.Chance(0.5) ? fit * es + rng.Uniform(0, es - 1) : (fit + 1) * es;
  if (fit >= 1 && box <= 256) s.box_dims[j] = static_cast<uint32_t>(box);
}

void ApplyProbe(Rng& rng, TensorMapSpec& s, uint64_t box_limit) {
  using Probe = void (*)(Rng&, TensorMapSpec&);
  static constexpr std::array<Probe, 7> kProbes = {
      ProbeEnum, ProbeRankAndAddress, ProbeGlobalDim,   ProbeGlobalStride,
      ProbeBox,  ProbeElementStride,  ProbeLayoutCombos};
  if (rng.Chance(1.0 / 8)) {
    ProbeBoxBytes(rng, s, box_limit);
  } else {
    kProbes[rng.Uniform(0, kProbes.size() - 1)](rng, s);
  }
}

// ---------------------------------------------------------------------------
// The driver side
// ---------------------------------------------------------------------------

std::string ResultName(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return absl::StrCat("CUresult ", static_cast<int>(result));
  }
  return name;
}

struct RuleTally {
  int checker_rejections = 0;  // specs whose first broken rule is this one
  int driver_rejections = 0;   // ... of which the driver rejected
  int disagreements = 0;
};

struct Tally {
  int specs = 0;
  int agreements = 0;
  int accepted_by_both = 0;
  int stricter_by_design = 0;  // tolerated: see the file comment
  int harness_errors = 0;      // driver errors other than INVALID_VALUE
  std::array<RuleTally, kTensorMapRuleCount> rules = {};
};

// Rules where the checker may reject what the driver encodes.
bool StricterByDesign(TensorMapRule rule) {
  return rule == TensorMapRule::kInterleaveSwizzle ||
         rule == TensorMapRule::kArchSwizzleAtom ||
         rule == TensorMapRule::kArchPackedType;
}

uint64_t SeedFromEnvironmentOrRandom() {
  if (const char* env = std::getenv("TAILOR_TEST_SEED")) {
    return std::strtoull(env, nullptr, 10);
  }
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

class TensorMapDifferentialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<const DriverApi*> api = LoadDriverApi();
    if (!api.ok()) GTEST_SKIP() << "no CUDA driver: " << api.status();
    api_ = *api;
    int count = 0;
    if (api_->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      GTEST_SKIP() << "no CUDA driver: no device";
    }
    ASSERT_EQ(api_->cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    int major = 0;
    int minor = 0;
    ASSERT_EQ(
        api_->cuDeviceGetAttribute(
            &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
        CUDA_SUCCESS);
    ASSERT_EQ(
        api_->cuDeviceGetAttribute(
            &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
        CUDA_SUCCESS);
    sm_arch_ = major * 10 + minor;
    if (sm_arch_ < 90)
      GTEST_SKIP() << "tensor maps need sm_90+, got sm_" << sm_arch_;
    ASSERT_EQ(api_->cuDevicePrimaryCtxRetain(&context_, device_), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuCtxSetCurrent(context_), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuMemAlloc(&allocation_, kAllocationBytes), CUDA_SUCCESS);
  }

  void TearDown() override {
    if (allocation_ != 0) api_->cuMemFree(allocation_);
    if (context_ != nullptr) api_->cuDevicePrimaryCtxRelease(device_);
  }

  const DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUdeviceptr allocation_ = 0;
  int sm_arch_ = 0;
};

void PrintTally(const Tally& t, uint64_t seed, int sm_arch, int driver) {
  std::printf(
      "tensor_map_differential: seed=%llu sm_%d driver=%d specs=%d "
      "same_verdict=%d (%.2f%%) accepted_by_both=%d "
      "stricter_by_design=%d (documented rules this driver does not enforce) "
      "unexplained_disagreements=%d harness_errors=%d\n",
      static_cast<unsigned long long>(seed), sm_arch, driver, t.specs,
      t.agreements, 100.0 * t.agreements / std::max(t.specs, 1),
      t.accepted_by_both, t.stricter_by_design,
      t.specs - t.agreements - t.stricter_by_design, t.harness_errors);
  std::printf("%-26s %10s %10s %13s\n", "rule", "checker", "driver",
              "disagreements");
  for (int r = 0; r < kTensorMapRuleCount; ++r) {
    const RuleTally& rule = t.rules[r];
    std::printf(
        "%-26s %10d %10d %13d\n",
        std::string(TensorMapRuleName(static_cast<TensorMapRule>(r))).c_str(),
        rule.checker_rejections, rule.driver_rejections, rule.disagreements);
  }
}

TEST_F(TensorMapDifferentialTest, CheckerAgreesWithDriverOnBoundarySpecs) {
  const uint64_t seed = SeedFromEnvironmentOrRandom();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  std::printf("tensor_map_differential: seed=%llu (TAILOR_TEST_SEED replays)\n",
              static_cast<unsigned long long>(seed));
  const uint64_t box_limit = TensorMapMaxBoxBytes(sm_arch_);
  int shared_memory_per_sm = 0;
  ASSERT_EQ(
      api_->cuDeviceGetAttribute(
          &shared_memory_per_sm,
          CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, device_),
      CUDA_SUCCESS);
  EXPECT_EQ(static_cast<uint64_t>(shared_memory_per_sm), box_limit)
      << "TensorMapMaxBoxBytes(" << sm_arch_ << ") disagrees with this "
      << "device's shared memory per SM: update its table";
  SpecGenerator generator(seed, allocation_, box_limit);
  Tally tally;
  int printed = 0;
  for (int n = 0; n < kSpecCount; ++n) {
    TensorMapSpec spec = generator.ValidSpec();
    const int probes = static_cast<int>(
        generator.rng().Pick<uint64_t>({0, 1, 1, 1, 1, 1, 2, 2}));
    for (int p = 0; p < probes; ++p) {
      ApplyProbe(generator.rng(), spec, box_limit);
    }

    const TensorMapVerdict verdict = DiagnoseTensorMap(spec, sm_arch_);
    TensorMapBytes bytes;
    const CUresult result = EncodeTensorMapTiled(*api_, spec, &bytes);
    const bool driver_ok = result == CUDA_SUCCESS;
    RuleTally& rule = tally.rules[static_cast<int>(verdict.rule)];
    ++tally.specs;
    if (!verdict.ok()) ++rule.checker_rejections;
    if (!driver_ok) ++rule.driver_rejections;
    if (!driver_ok && result != CUDA_ERROR_INVALID_VALUE)
      ++tally.harness_errors;

    if (driver_ok == verdict.ok()) {
      ++tally.agreements;
      if (driver_ok) ++tally.accepted_by_both;
      continue;
    }
    if (driver_ok && StricterByDesign(verdict.rule)) {
      ++tally.stricter_by_design;
      continue;
    }
    ++rule.disagreements;
    if (printed++ < kMaxPrintedDisagreements) {
      ADD_FAILURE() << "disagreement on " << spec.ToString()
                    << "\n  checker: " << TensorMapRuleName(verdict.rule) << " "
                    << verdict.status
                    << "\n  driver:  " << ResultName(*api_, result);
    }
  }
  PrintTally(tally, seed, sm_arch_, api_->driver_version);
  EXPECT_EQ(tally.agreements + tally.stricter_by_design, tally.specs)
      << "unexplained disagreements between the checker and the driver";
  EXPECT_EQ(tally.harness_errors, 0);
  EXPECT_GE(tally.specs, 10000);
}

}  // namespace
}  // namespace tailor::cuda
