// tests/fuzz/c_api_checks.h — what the C ABI fuzz harnesses (c_api_fuzz,
// c_api_ragged_fuzz) check of every entry, and the runtimes they call.
//
// Two CPU runtimes: one with the JIT, its kernels cached on disk in
// $TAILOR_FUZZ_CACHE_DIR (calls whose kernels lie in a harness's small
// tables), one with disable_jit that checks everything and runs nothing.
// CheckOp runs an entry and checks what every op promises: a documented
// status, a message exactly when it failed, INVALID_ARGUMENT for a null, no
// launch and no output written when it failed, no kernel looked up before
// an INVALID_ARGUMENT.
#ifndef TAILOR_TESTS_FUZZ_C_API_CHECKS_H_
#define TAILOR_TESTS_FUZZ_C_API_CHECKS_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "c_tensors.h"
#include "fuzz_input.h"
#include "tailor/c_api.h"

namespace tailor::fuzz {

// ---- Runtimes ---------------------------------------------------------------

struct Runtimes {
  tailor_runtime* jit = nullptr;
  tailor_runtime* checks_only = nullptr;  // disable_jit, no disk cache
};

inline tailor_runtime* CreateOrDie(bool jit) {
  tailor_runtime_options options = {};
  options.backend = TAILOR_BACKEND_CPU;
  options.log_level = "off";
  options.cpu_threads = 1;
  const char* dir = std::getenv("TAILOR_FUZZ_CACHE_DIR");
  options.cache_dir = jit ? dir : nullptr;
  options.disable_disk_cache = !jit || dir == nullptr;
  options.disable_jit = !jit;
  tailor_runtime* runtime = nullptr;
  if (tailor_runtime_create(&options, &runtime) != TAILOR_STATUS_OK) {
    std::fprintf(stderr, "c_api_fuzz: tailor_runtime_create: %s\n",
                 tailor_last_error());
    std::abort();
  }
  return runtime;
}

inline const Runtimes& GetRuntimes() {
  static const Runtimes runtimes{.jit = CreateOrDie(true),
                                 .checks_only = CreateOrDie(false)};
  return runtimes;
}

// The runtime a call may use: the JIT one only when every tensor has memory
// and the kernels it can need are in the bounded set.
inline tailor_runtime* Pick(const CTensors& call, bool bounded) {
  const Runtimes& r = GetRuntimes();
  return bounded && !call.has_virtual_data() ? r.jit : r.checks_only;
}

// ---- Checks common to every entry ------------------------------------------

// A top-level counter of a StatsSnapshot::ToJson text.
inline uint64_t JsonCounter(const char* json, const char* key) {
  const char* at = std::strstr(json, key);
  FUZZ_CHECK(at != nullptr) << key << " missing from " << json;
  return std::strtoull(at + std::strlen(key), nullptr, 10);
}

struct Counters {
  uint64_t lookups = 0, launches = 0;
};

inline Counters Read(const tailor_runtime* runtime) {
  char* json = nullptr;
  const tailor_status s =
      tailor_runtime_stats(runtime, TAILOR_STATS_JSON, &json);
  FUZZ_CHECK(s == TAILOR_STATUS_OK && json != nullptr) << tailor_last_error();
  const Counters c{.lookups = JsonCounter(json, "\"lookups\":"),
                   .launches = JsonCounter(json, "\"launches\":")};
  tailor_string_free(json);
  return c;
}

using Codes = std::initializer_list<tailor_status>;
inline constexpr Codes kOpCodes = {
    TAILOR_STATUS_OK, TAILOR_STATUS_INVALID_ARGUMENT,
    TAILOR_STATUS_FAILED_PRECONDITION, TAILOR_STATUS_RESOURCE_EXHAUSTED};

// A code from `allowed`, a message exactly when it failed, and
// INVALID_ARGUMENT when the call got a null.
// Returns the message.
inline std::string CheckStatus(const char* entry, tailor_status s,
                               Codes allowed, bool got_null) {
  const std::string message = tailor_last_error();
  FUZZ_CHECK(std::find(allowed.begin(), allowed.end(), s) != allowed.end())
      << entry << " returned " << tailor_status_name(s) << ": " << message;
  FUZZ_CHECK(std::strcmp(tailor_status_name(s), "UNKNOWN_CODE") != 0)
      << entry << ": " << s;
  FUZZ_CHECK((s == TAILOR_STATUS_OK) == message.empty())
      << entry << " returned " << tailor_status_name(s) << " with message \""
      << message << "\"";
  // (Which argument an entry names first is not specified: a null and a
  // bad field may meet in one call.)
  FUZZ_CHECK(!got_null || s == TAILOR_STATUS_INVALID_ARGUMENT)
      << entry << " given a null returned " << tailor_status_name(s) << ": "
      << message;
  return message;
}

// Nulls for pointer arguments, now and then.
class Nulls {
 public:
  explicit Nulls(FuzzInput& in) : in_(in) {}
  template <typename T>
  T* Maybe(T* p) {
    if (!in_.OneIn(24)) return p;
    any_ = true;
    return nullptr;
  }
  bool any() const { return any_; }

 private:
  FuzzInput& in_;
  bool any_ = false;
};

struct Outcome {
  tailor_status status;
  std::string message;  // tailor_last_error() right after the call
  bool ok() const { return status == TAILOR_STATUS_OK; }
};

// Runs `call_entry` (an op entry of `runtime`) and checks what every op
// promises.
template <typename Entry>
Outcome CheckOp(const char* entry, const CTensors& call,
                tailor_runtime* runtime, const Nulls& nulls, Entry call_entry,
                Codes allowed = kOpCodes) {
  const Counters before = Read(runtime);
  const tailor_status s = call_entry();
  const std::string message = CheckStatus(entry, s, allowed, nulls.any());
  if (s == TAILOR_STATUS_OK) return {s, message};
  const Counters after = Read(runtime);
  FUZZ_CHECK(after.launches == before.launches) << entry << ": " << message;
  if (s == TAILOR_STATUS_INVALID_ARGUMENT) {
    FUZZ_CHECK(after.lookups == before.lookups)
        << entry << " looked a kernel up before rejecting: " << message;
  }
  FUZZ_CHECK(call.OutputsUnchanged())
      << entry << " wrote before failing: " << message;
  return {s, message};
}

// An index tensor of `dims` whose entries are in [lo, hi] (or anything).
inline tailor_tensor Entries(CTensors& call, const std::vector<int64_t>& dims,
                             int64_t lo, int64_t hi) {
  return call.Index(dims, [=](FuzzInput& f, int64_t) {
    return f.OneIn(32) || hi < lo ? f.Take<int32_t>()
                                  : static_cast<int32_t>(f.InRange(lo, hi));
  });
}

// A scale argument: `usual`, or now and then NaN, infinity, -1 or a
// denormal (all but the denormal refused).
inline float Scale(FuzzInput& in, float usual) {
  switch (in.InRange(0, 15)) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return -1.0f;
    case 3:
      return std::numeric_limits<float>::denorm_min();
    default:
      return usual;
  }
}

}  // namespace tailor::fuzz

#endif  // TAILOR_TESTS_FUZZ_C_API_CHECKS_H_
