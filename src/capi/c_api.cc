// The C ABI's shared part: errors, versions, tensors, runtimes and stats.
// The MoE entries are in c_api_moe.cc.
#include "tailor/c_api.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "capi/c_api_internal.h"
#include "core/tensor_checks.h"
#include "tailor/status.h"

namespace tailor::capi {
namespace {

thread_local std::string last_error;

absl::Status CheckEnumRange(absl::string_view name, int32_t value,
                            int32_t first, int32_t last,
                            absl::string_view what) {
  if (value < first || value > last) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a ", what,
                                                   " value (", first, "..",
                                                   last, "), got ", value));
  }
  return absl::OkStatus();
}

static_assert(TAILOR_JIT_MODE_DEFAULT ==
              static_cast<int>(Runtime::JitMode::kDefault));
static_assert(TAILOR_JIT_MODE_BLOCKING ==
              static_cast<int>(Runtime::JitMode::kBlocking));
static_assert(TAILOR_JIT_MODE_BACKGROUND ==
              static_cast<int>(Runtime::JitMode::kBackground));

absl::StatusOr<Runtime::Options> ToOptions(const tailor_runtime_options& in) {
  TAILOR_RETURN_IF_ERROR(CheckEnumRange("options.backend", in.backend,
                                        TAILOR_BACKEND_AUTO, TAILOR_BACKEND_HIP,
                                        "tailor_backend"));
  TAILOR_RETURN_IF_ERROR(
      CheckEnumRange("options.jit_mode", in.jit_mode, TAILOR_JIT_MODE_DEFAULT,
                     TAILOR_JIT_MODE_BACKGROUND, "tailor_jit_mode"));
  if (in.memory_cache_capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.memory_cache_capacity: must be >= 0 (0: the "
                     "default), got ",
                     in.memory_cache_capacity));
  }
  Runtime::Options out;
  out.backend = static_cast<BackendKind>(in.backend);
  out.device_index = in.device_index;
  if (in.cache_dir != nullptr) out.cache_dir = in.cache_dir;
  out.disable_disk_cache = in.disable_disk_cache != 0;
  out.disable_jit = in.disable_jit != 0;
  if (in.memory_cache_capacity > 0) {
    out.memory_cache_capacity = static_cast<size_t>(in.memory_cache_capacity);
  }
  out.compile_threads = in.compile_threads;
  out.cpu_threads = in.cpu_threads;
  if (in.log_level != nullptr) out.log_level = in.log_level;
  if (in.stats_addr != nullptr) out.stats_addr = in.stats_addr;
  out.jit_mode = static_cast<Runtime::JitMode>(in.jit_mode);
  return out;
}

// A malloc'd copy of `s`, for tailor_string_free.
absl::StatusOr<char*> CopyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) return absl::ResourceExhaustedError("out of host memory");
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

}  // namespace

tailor_status Record(const absl::Status& status) noexcept {
  try {
    if (status.ok()) {
      last_error.clear();
    } else {
      last_error.assign(status.message().data(), status.message().size());
    }
  } catch (...) {
    last_error.clear();  // no room for the text; the code still tells
  }
  return static_cast<tailor_status>(status.code());
}

absl::Status ExpectNonNull(absl::string_view name, const void* p) {
  if (p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": must not be null"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorRef> ToTensorRef(absl::string_view name,
                                      const tailor_tensor& t) {
  TAILOR_RETURN_IF_ERROR(CheckEnumRange(absl::StrCat(name, ".dtype"), t.dtype,
                                        TAILOR_DTYPE_F32, TAILOR_DTYPE_F8E4M3,
                                        "tailor_dtype"));
  TAILOR_RETURN_IF_ERROR(CheckEnumRange(
      absl::StrCat(name, ".device_type"), t.device_type, TAILOR_DEVICE_CPU,
      TAILOR_DEVICE_HIP, "tailor_device_type"));
  if (t.rank < 0 || t.rank > TAILOR_MAX_RANK) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": rank must be in [0, ", TAILOR_MAX_RANK, "], got ", t.rank));
  }
  TensorRef out;
  out.data = t.data;
  out.dtype = static_cast<DType>(t.dtype);
  out.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) {
    out.dims[i] = t.dims[i];
    out.strides[i] = t.strides[i];
  }
  out.device = {.type = static_cast<DeviceType>(t.device_type),
                .index = t.device_index};
  TAILOR_RETURN_IF_ERROR(ValidateTensor(name, out));
  return out;
}

tailor_tensor FromTensorRef(const TensorRef& t) {
  tailor_tensor out = {};
  out.data = t.data;
  out.dtype = static_cast<int32_t>(t.dtype);
  out.rank = t.rank;
  for (int i = 0; i < t.rank && i < TAILOR_MAX_RANK; ++i) {
    out.dims[i] = t.dims[i];
    out.strides[i] = t.strides[i];
  }
  out.device_type = static_cast<int32_t>(t.device.type);
  out.device_index = t.device.index;
  return out;
}

absl::StatusOr<Runtime*> RuntimeOf(absl::string_view name,
                                   const tailor_runtime* handle) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull(name, handle));
  if (handle->runtime == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a runtime"));
  }
  return handle->runtime.get();
}

}  // namespace tailor::capi

using tailor::capi::ExpectNonNull;
using tailor::capi::Guard;
using tailor::capi::RuntimeOf;

extern "C" {

const char* tailor_last_error(void) { return tailor::capi::last_error.c_str(); }

const char* tailor_status_name(int code) {
  static constexpr const char* kNames[] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) {
    return "UNKNOWN_CODE";
  }
  return kNames[code];
}

uint32_t tailor_c_api_version(void) { return TAILOR_C_API_VERSION; }

const char* tailor_version(void) { return TAILOR_VERSION_STRING; }

tailor_tensor tailor_tensor_contiguous(void* data, int32_t dtype, int32_t rank,
                                       const int64_t* dims) {
  tailor_tensor t = {};
  t.data = data;
  t.dtype = dtype;
  t.rank = rank < 0 ? 0 : (rank > TAILOR_MAX_RANK ? TAILOR_MAX_RANK : rank);
  if (dims == nullptr) t.rank = 0;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.dims[d] = dims[d];
    t.strides[d] = stride;
    // Saturates where the product of dims overflows (see c_api.h).
    if (__builtin_mul_overflow(stride, dims[d], &stride)) stride = INT64_MAX;
  }
  return t;
}

tailor_status tailor_runtime_create(const tailor_runtime_options* options,
                                    tailor_runtime** out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    *out = nullptr;
    const tailor_runtime_options defaults = {};
    TAILOR_ASSIGN_OR_RETURN(
        tailor::Runtime::Options cpp_options,
        tailor::capi::ToOptions(options ? *options : defaults));
    TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<tailor::Runtime> runtime,
                            tailor::Runtime::Create(cpp_options));
    std::string stats_address = runtime->stats_address();
    *out = new tailor_runtime{std::move(runtime), std::move(stats_address)};
    return absl::OkStatus();
  });
}

void tailor_runtime_destroy(tailor_runtime* runtime) {
  Guard([&]() -> absl::Status {
    delete runtime;
    return absl::OkStatus();
  });
}

tailor_status tailor_runtime_get_info(const tailor_runtime* runtime,
                                      tailor_runtime_info* out) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    out->backend = static_cast<int32_t>(rt->backend());
    out->device_type = static_cast<int32_t>(rt->device().type);
    out->device_index = rt->device().index;
    out->arch = rt->arch().c_str();
    out->cache_dir = rt->cache_dir().c_str();
    out->stats_address = runtime->stats_address.c_str();
    out->jit_mode = static_cast<int32_t>(rt->jit_mode());
    return absl::OkStatus();
  });
}

tailor_status tailor_runtime_stats(const tailor_runtime* runtime,
                                   int32_t format, char** out) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    *out = nullptr;
    TAILOR_RETURN_IF_ERROR(tailor::capi::CheckEnumRange(
        "format", format, TAILOR_STATS_JSON, TAILOR_STATS_PROMETHEUS,
        "tailor_stats_format"));
    tailor::StatsSnapshot snapshot = rt->stats();
    TAILOR_ASSIGN_OR_RETURN(
        *out, tailor::capi::CopyString(format == TAILOR_STATS_JSON
                                           ? snapshot.ToJson()
                                           : snapshot.ToPrometheus()));
    return absl::OkStatus();
  });
}

void tailor_string_free(char* s) { std::free(s); }

}  // extern "C"
