// capi/c_api_internal.h — what the C ABI's entries share: the handle
// structs, the boundary guard and tensor conversion.
//
// Every entry of tailor/c_api.h is written as
//
//   tailor_status tailor_x(...) {
//     return capi::Guard([&]() -> absl::Status { ... });
//   }
//
// Guard runs the body, records its message as the thread's last error and
// returns its code; an exception thrown inside (std::bad_alloc from a
// container, anything from a dependency) is caught there and reported, so
// none crosses into C.
#ifndef TAILOR_CAPI_C_API_INTERNAL_H_
#define TAILOR_CAPI_C_API_INTERNAL_H_

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tailor/c_api.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

struct tailor_runtime {
  std::unique_ptr<tailor::Runtime> runtime;
  std::string stats_address;  // for tailor_runtime_info
};

struct tailor_moe_workspace {
  tailor::moe::Workspace workspace;
};

namespace tailor::capi {

// Sets the calling thread's tailor_last_error() to `status`'s message ("" on
// ok) and returns its code. Never throws.
tailor_status Record(const absl::Status& status) noexcept;

// Runs `body` (returning absl::Status) behind the boundary.
template <typename Body>
tailor_status Guard(Body&& body) noexcept {
  try {
    return Record(body());
  } catch (const std::bad_alloc&) {
    return Record(absl::ResourceExhaustedError("out of host memory"));
  } catch (const std::exception& e) {
    return Record(absl::InternalError(
        std::string("unexpected C++ exception: ") + e.what()));
  } catch (...) {
    return Record(absl::InternalError("unexpected C++ exception"));
  }
}

// InvalidArgument("<name>: must not be null") unless `p` is set.
absl::Status ExpectNonNull(absl::string_view name, const void* p);

// A checked TensorRef of `t` named `name` (dtype and device type must be
// values of the C enums; the op checks the rest).
absl::StatusOr<TensorRef> ToTensorRef(absl::string_view name,
                                      const tailor_tensor& t);
// The C view of `t`.
tailor_tensor FromTensorRef(const TensorRef& t);

// The dtype of an attention struct's `dtype` field: 0 is bf16; other
// tailor_dtype values reach the op's check, which names them; values
// outside the enum are InvalidArgument naming `name` here.
absl::StatusOr<DType> ToAttentionDType(absl::string_view name, int32_t dtype);

// The runtime of `handle`, or InvalidArgument naming `name`.
absl::StatusOr<Runtime*> RuntimeOf(absl::string_view name,
                                   const tailor_runtime* handle);

}  // namespace tailor::capi

#endif  // TAILOR_CAPI_C_API_INTERNAL_H_
