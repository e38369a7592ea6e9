// Tests for backends/cuda/driver_api: loading without a driver, the toolkit's
// stub libcuda, and the one CUresult -> Status conversion.
#include "backends/cuda/driver_api.h"

#include <cuda.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tailor::cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// True when this process can load a real driver (the GPU CI machines).
bool HaveDriver() { return LoadDriverApi().ok(); }

TEST(DriverApiTest, LoadIsCachedAndReportsTheMissingDriver) {
  const absl::StatusOr<const DriverApi*> first = LoadDriverApi();
  // Sixteen threads racing the (already finished) load see the same outcome.
  std::vector<std::thread> threads;
  std::vector<absl::StatusOr<const DriverApi*>> results(16, nullptr);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&results, i] { results[i] = LoadDriverApi(); });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, first);
  EXPECT_EQ(internal::DriverLoadAttemptsForTesting(), 1);

  if (first.ok()) {
    const DriverApi* api = *first;
    EXPECT_GE(api->driver_version, kMinDriverVersion);
    EXPECT_NE(api->cuTensorMapEncodeTiled, nullptr);
    EXPECT_NE(api->cuEventElapsedTime, nullptr);
    GTEST_SKIP() << "a CUDA driver is installed: the missing-driver path "
                    "cannot be observed here";
  }
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(first.status().message()),
              StartsWith("libcuda.so.1 not found: no NVIDIA driver on this "
                         "machine (dlopen: "));
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("libcuda.so.1"));
}

TEST(DriverApiTest, MissingLibraryNamesTheFirstCandidate) {
  const char* const names[] = {"libtailor_no_such_driver.so.1",
                               "libtailor_no_such_driver.so"};
  const auto api = internal::OpenDriverLibrary(names, /*initialize=*/false);
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(api.status().message()),
              StartsWith("libtailor_no_such_driver.so.1 not found: no NVIDIA "
                         "driver on this machine (dlopen: "
                         "libtailor_no_such_driver.so.1: cannot open"));
}

TEST(DriverApiTest, LibraryWithoutGetProcAddressIsRejected) {
  // libdl/libc exist everywhere and are no driver.
  const char* const names[] = {"libc.so.6"};
  const auto api = internal::OpenDriverLibrary(names, /*initialize=*/false);
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(api.status().message()),
              HasSubstr("no cuGetProcAddress_v2: the NVIDIA driver predates "
                        "CUDA 12.0"));
}

#ifdef TAILOR_CUDA_STUB_LIBCUDA
// The toolkit ships a stub libcuda for linking; every call returns
// CUDA_ERROR_STUB_LIBRARY. Loading it must fail cleanly, not crash.
TEST(DriverApiTest, ToolkitStubLibraryIsUnavailable) {
  // Settle the cached load first: the stub's soname is libcuda.so.1, so
  // while it is open a dlopen("libcuda.so.1") would find it.
  (void)LoadDriverApi();
  if (HaveDriver()) GTEST_SKIP() << "a real driver is loaded";
  const char* const names[] = {TAILOR_CUDA_STUB_LIBCUDA};
  const auto api = internal::OpenDriverLibrary(names, /*initialize=*/true);
  if (!api.ok() && absl::StrContains(api.status().message(), "not found")) {
    GTEST_SKIP() << "no stub at " << TAILOR_CUDA_STUB_LIBCUDA;
  }
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(api.status().message(),
            "cuGetProcAddress(cuGetErrorName): CUDA_ERROR_STUB_LIBRARY (34)");
}
#endif

struct Mapping {
  CUresult result;
  absl::StatusCode code;
  const char* name;
};

TEST(CudaResultToStatusTest, MapsCodesAsDocumented) {
  const std::vector<Mapping> mappings = {
      {CUDA_ERROR_INVALID_VALUE, absl::StatusCode::kInvalidArgument,
       "CUDA_ERROR_INVALID_VALUE (1)"},
      {CUDA_ERROR_INVALID_HANDLE, absl::StatusCode::kInvalidArgument,
       "CUDA_ERROR_INVALID_HANDLE (400)"},
      {CUDA_ERROR_INVALID_PTX, absl::StatusCode::kInvalidArgument,
       "CUDA_ERROR_INVALID_PTX (218)"},
      {CUDA_ERROR_OUT_OF_MEMORY, absl::StatusCode::kResourceExhausted,
       "CUDA_ERROR_OUT_OF_MEMORY (2)"},
      {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, absl::StatusCode::kResourceExhausted,
       "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701)"},
      {CUDA_ERROR_NO_DEVICE, absl::StatusCode::kUnavailable,
       "CUDA_ERROR_NO_DEVICE (100)"},
      {CUDA_ERROR_NOT_INITIALIZED, absl::StatusCode::kUnavailable,
       "CUDA_ERROR_NOT_INITIALIZED (3)"},
      {CUDA_ERROR_STUB_LIBRARY, absl::StatusCode::kUnavailable,
       "CUDA_ERROR_STUB_LIBRARY (34)"},
      {CUDA_ERROR_NOT_FOUND, absl::StatusCode::kNotFound,
       "CUDA_ERROR_NOT_FOUND (500)"},
      {CUDA_ERROR_INVALID_CONTEXT, absl::StatusCode::kFailedPrecondition,
       "CUDA_ERROR_INVALID_CONTEXT (201)"},
      {CUDA_ERROR_NO_BINARY_FOR_GPU, absl::StatusCode::kFailedPrecondition,
       "CUDA_ERROR_NO_BINARY_FOR_GPU (209)"},
      {CUDA_ERROR_NOT_SUPPORTED, absl::StatusCode::kUnimplemented,
       "CUDA_ERROR_NOT_SUPPORTED (801)"},
      {CUDA_ERROR_LAUNCH_TIMEOUT, absl::StatusCode::kDeadlineExceeded,
       "CUDA_ERROR_LAUNCH_TIMEOUT (702)"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, absl::StatusCode::kInternal,
       "CUDA_ERROR_ILLEGAL_ADDRESS (700)"},
      {CUDA_ERROR_UNKNOWN, absl::StatusCode::kInternal,
       "CUDA_ERROR_UNKNOWN (999)"},
  };
  const bool driver = HaveDriver();
  for (const Mapping& m : mappings) {
    SCOPED_TRACE(m.name);
    const absl::Status s = CudaResultToStatus(m.result, "cuModuleLoadData");
    EXPECT_EQ(s.code(), m.code);
    const std::string message(s.message());
    EXPECT_THAT(message, StartsWith("cuModuleLoadData: "));
    // Without a driver only the built-in names exist: those codes not in the
    // mapping table read "CUresult <n>" (the numeric fallback).
    if (driver || m.code != absl::StatusCode::kInternal) {
      EXPECT_THAT(message, HasSubstr(m.name));
    }
  }
}

TEST(CudaResultToStatusTest, SuccessIsOkAndUnknownCodesKeepTheirNumber) {
  EXPECT_TRUE(CudaResultToStatus(CUDA_SUCCESS, "cuInit").ok());
  const absl::Status s = CudaResultToStatus(static_cast<CUresult>(12345),
                                            "cuTensorMapEncodeTiled");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  if (!HaveDriver()) {
    EXPECT_EQ(s.message(), "cuTensorMapEncodeTiled: CUresult 12345");
  } else {
    EXPECT_THAT(std::string(s.message()), HasSubstr("12345"));
  }
}

TEST(CudaResultToStatusTest, ConversionNeverLoadsTheDriver) {
  // Attempts so far: at most the one LoadDriverApi made in this process.
  const int before = internal::DriverLoadAttemptsForTesting();
  (void)CudaResultToStatus(CUDA_ERROR_INVALID_VALUE, "x");
  EXPECT_EQ(internal::DriverLoadAttemptsForTesting(), before);
}

}  // namespace
}  // namespace tailor::cuda
