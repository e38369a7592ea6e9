// warmup/profile.h — a serving profile: what a server will run, for
// `tailor-warmup --profile FILE.json` to precompile before it starts.
//
// Schema "tailor.profile/1" (tools/profiles/ has one per model):
//
//   {
//     "schema": "tailor.profile/1",                       required
//     "name": "qwen3-30b-a3b",                            required
//     "description": "free text",                         optional
//     "target": {"backend": "cpu" | "cuda",               required
//                "arch": "native" | "x86_64-znver3" | "sm_90a" | ...},
//                                           arch optional, default "native"
//     "tuning": "moe.cluster=2",            optional: the server's tuning
//                      keys (Runtime::Options::tuning), validated the same
//                      way; tailor-warmup builds the kernels they select
//     "batch_buckets": [1, 2, 4, 8, ...],   optional: the batch sizes the
//                      server runs (e.g. its CUDA-graph sizes); strictly
//                      increasing, in [1, 2^31 - 1]. Op families whose keys
//                      hold a bucket id use it; MoE keys do not
//     "moe": {                              optional; an object or an array
//       "experts": 128,                     E, in [1, 2^20]
//       "topk": 8,                          k, in [1, 64] and at most E
//       "hidden": 2048,                     H, in [1, 65536]
//       "intermediate": 768,                I, in [1, 65536]
//       "dtypes": ["bf16"],                 each bf16, f32 or f8e4m3;
//                                           non-empty. f8e4m3: FP8 weights
//                                           with 128 x 128 block scales and
//                                           bf16 activations (DeepSeek-V3,
//                                           Qwen3 FP8); H and I multiples
//                                           of 128
//       "activation": "silu",               optional, default "silu"
//       "routing": [{"tile_rows": 16,       in [0, 128]; 0: the backend's
//                                           choice (cpu 16; cuda 64, and
//                                           128 on sm_90a); the backend's
//                                           own limit applies (cpu 64)
//                    "tail": "pow2"}]       pow2 | exact | full
//     },                                    routing: an object or an array;
//                                           optional, default tile_rows 0,
//                                           tail pow2 (RoutingPolicy{})
//     "paged_decode": {                     optional; an object or an array
//       "heads_q": 32, "heads_kv": 8,       in [1, 1024]; heads_q a
//                                           multiple of heads_kv, at most
//                                           16 times it
//       "head_dim": 128,                    64, 128 or 256
//       "page_size": 16,                    in [1, 256]
//       "dtypes": ["bf16"],                 each bf16, f16 or f32 (the
//                                           kernels take bf16 and f16: f32
//                                           is listed as skipped)
//       "ragged_masks": ["causal"]          optional: the masks of the
//                                           layer's ragged attention
//                                           (prefill, mixed steps), each
//                                           none | causal | window; default
//                                           ["causal"]; [] lists decode only
//     }
//   }
//
// Unknown fields anywhere are errors (a typo must not silently select a
// default). The sections' rules are the op fronts' own (ops/moe/checks.h,
// ops/attention/checks.h CheckDecodeShape), so a profile accepts exactly the
// shapes the runtime serves. A new op family adds one optional section: its
// struct here, its parser in profile.cc, and its keys in
// warmup/kernel_catalog.cc.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(ServingProfile profile, ParseProfile(text));
//   for (const MoeLayerProfile& layer : profile.moe) ...
#ifndef TAILOR_WARMUP_PROFILE_H_
#define TAILOR_WARMUP_PROFILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ops/attention/ragged_spec.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

inline constexpr char kProfileSchema[] = "tailor.profile/1";
inline constexpr char kNativeArch[] = "native";

struct MoeLayerProfile {
  std::string path;  // "moe" or "moe[1]": names the section in messages
  int64_t experts = 0;
  int64_t topk = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  std::vector<DType> dtypes;
  std::vector<moe::RoutingPolicy> routing;
};

// An attention layer: its decode kernels, and its ragged-attention kernels
// for each of `ragged_masks`.
struct PagedDecodeProfile {
  std::string path;  // "paged_decode" or "paged_decode[1]"
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  std::vector<DType> dtypes;
  std::vector<RaggedMask> ragged_masks = {RaggedMask::kCausal};
};

struct ServingProfile {
  std::string name;
  std::string description;
  BackendKind backend = BackendKind::kCpu;
  std::string arch = kNativeArch;
  std::vector<int64_t> batch_buckets;
  std::string tuning;  // canonical tuning text ("" none)
  std::vector<MoeLayerProfile> moe;
  std::vector<PagedDecodeProfile> paged_decode;
};

// Parses and validates a profile document. InvalidArgument "profile: ..."
// listing every problem, each naming its field, e.g.
// "profile: moe.hidden: must be an integer in [1, 65536], got \"2048\"".
absl::StatusOr<ServingProfile> ParseProfile(absl::string_view json_text);

// "bf16", "f32", ... back to the DType; nullopt for other names.
std::optional<DType> DTypeFromName(absl::string_view name);

}  // namespace tailor::internal

#endif  // TAILOR_WARMUP_PROFILE_H_
