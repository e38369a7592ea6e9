// core/spec_key.h — the complete, hashable identity of one kernel variant.
//
// A SpecKey names what a kernel is specialized on: op, backend, target arch,
// dtypes, static model dims (N, K, head_dim, page size, ...), the bucket id,
// the tail class and the tile config. It never holds ragged quantities (token
// counts, batch sizes, sequence lengths): those stay runtime values, and only
// their bucket id / tail class reaches the key.
//
// SpecKey is a fixed-size value (no allocation) so that the warm path can
// build one per launch. Hash() is xxh3-128 over a canonical little-endian
// serialization; its values are pinned by golden tests and stable across
// processes and runs.
//
// Example:
//   SpecKey key = {.op = OpKind::kMoeGroupedGemm, .backend = BackendKind::kCpu,
//                  .dtypes = {DType::kBF16, DType::kBF16, DType::kF32},
//                  .dims = {768, 2048}, .tail_class = 8,
//                  .tile = {.m = 16, .n = 64, .k = 64}};
//   key.SetArch("x86_64-znver3");
//   key.ToString();
//   // "moe.grouped_gemm/cpu/x86_64-znver3/bf16,bf16,f32/"
//   //  "N=768,K=2048/b0/t8/m16n64k64" (one string)
#ifndef TAILOR_CORE_SPEC_KEY_H_
#define TAILOR_CORE_SPEC_KEY_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/hash.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The library's kernel ops, by op family (core/family_registry.h). Values
// are stable (part of the hash); append only. Values 1, 2, 30 and 31 belong
// to the test kernels (tests/kernels/test_op_kinds.h), which register their
// names with RegisterOpKind: never reuse them.
enum class OpKind : uint16_t {
  kInvalid = 0,
  kMoePack = 10,
  kMoeGroupedGemm = 11,
  kMoeCombine = 12,
  kMoeRoute = 13,  // device inspector kernels (variant: count, plan, scatter)
  kAttentionDecode = 14,       // paged-KV decode attention (split-KV pieces)
  kAttentionDecodeMerge = 15,  // log-sum-exp merge of split pieces
  kAttentionRagged = 16,       // ragged paged attention (query tiles)
  kAttentionRaggedMerge = 17,  // log-sum-exp merge of split query tiles
};
inline constexpr int kNumOpKinds = 64;  // upper bound on OpKind values

struct OpInfo {
  absl::string_view name;                      // "moe.grouped_gemm"
  std::array<absl::string_view, 6> dim_names;  // names of SpecKey::dims
};
// Name and dim names of `op`; {"invalid", {}} for unknown values.
const OpInfo& GetOpInfo(OpKind op);
// The OpKind whose GetOpInfo(op).name is `name`; kInvalid when none is.
OpKind OpKindFromName(absl::string_view name);
// Names an op the library does not define (test kernels, from a static
// initializer before any Runtime exists). `info` must outlive every lookup
// (a static). InvalidArgument when `op` is out of range, is a library op,
// or is registered under another name.
absl::Status RegisterOpKind(OpKind op, const OpInfo* info);

struct TileConfig {
  int32_t m = 0;
  int32_t n = 0;
  int32_t k = 0;
  int32_t stages = 0;
  int32_t warps = 0;
  int32_t cluster = 0;
  friend bool operator==(const TileConfig&, const TileConfig&) = default;
};

inline constexpr int kMaxSpecDtypes = 4;
inline constexpr int kMaxSpecDims = 6;
inline constexpr int kMaxArchLength = 31;

struct SpecKey {
  OpKind op = OpKind::kInvalid;
  BackendKind backend = BackendKind::kCpu;
  std::array<char, kMaxArchLength + 1> arch = {};  // NUL-terminated
  // Unused entries are DType{0}.
  std::array<DType, kMaxSpecDtypes> dtypes = {};
  // Static model dims, meaning given by GetOpInfo(op).dim_names.
  std::array<int64_t, kMaxSpecDims> dims = {};
  int32_t bucket_id = 0;
  int32_t tail_class = 0;  // 0: core (full tiles)
  TileConfig tile = {};
  uint32_t variant = 0;  // op-defined flags, e.g. fused epilogue

  // Copies at most kMaxArchLength chars of `arch`.
  void SetArch(absl::string_view arch_name);
  absl::string_view arch_name() const;

  Hash128 Hash() const;
  // Readable form for logs; FileStem() is a file-name-safe short form.
  std::string ToString() const;
  std::string FileStem() const;

  friend bool operator==(const SpecKey&, const SpecKey&) = default;
};

// The backend and exact arch that keys are built for (Engine::target()). A
// view: `arch` must outlive it. Key builders take one so that tools can build
// keys for a target without a Runtime (tailor-warmup --dry-run).
struct KeyTarget {
  BackendKind backend = BackendKind::kCpu;
  absl::string_view arch;

  // A key for `op` with backend and arch filled in; everything else zero.
  SpecKey MakeKey(OpKind op) const;
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_SPEC_KEY_H_
