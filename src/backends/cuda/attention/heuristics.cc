#include "backends/cuda/attention/heuristics.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "templates/cuda/attention/decode_params.h"

namespace tailor::cuda {

using tailor::internal::DecodeShape;

int DecodeStagesFor(int64_t head_dim, int64_t group, int64_t shared_limit,
                    int ctas_per_sm) {
  constexpr int64_t kReserved = 1024;  // per resident CTA
  const int64_t per_cta =
      ctas_per_sm <= 1 ? shared_limit
                       : (shared_limit + kReserved) / ctas_per_sm - kReserved;
  for (int stages = kDecodeMaxStages; stages >= 2; --stages) {
    if (DecodeSharedBytes(static_cast<int>(head_dim), static_cast<int>(group),
                          stages) <= per_cta) {
      return stages;
    }
  }
  return 0;
}

int DecodeLaunchStages(int64_t head_dim, int64_t group, int64_t workers,
                       int multiprocessors, int64_t shared_limit,
                       int max_stages) {
  int stages = DecodeStagesFor(head_dim, group, shared_limit);
  if (workers > multiprocessors) {
    const int two = DecodeStagesFor(head_dim, group, shared_limit, 2);
    if (two >= 2) stages = two;
  }
  if (max_stages != 0) stages = std::min(stages, max_stages);
  return stages;
}

int DecodeCtasPerSm(const DecodeShape& shape, int64_t batch,
                    int multiprocessors, int64_t shared_limit) {
  const bool pairs_fill_the_sms = batch * shape.num_kv_heads >= multiprocessors;
  const bool two_fit =
      DecodeStagesFor(shape.head_dim, shape.group, shared_limit, 2) >= 2;
  return pairs_fill_the_sms && two_fit ? 2 : 1;
}

int DecodeCutWorkers(const DecodeShape& shape,
                     absl::Span<const int32_t> seq_lens, int workers,
                     int multiprocessors) {
  if (workers <= multiprocessors) return workers;
  const int64_t pairs =
      static_cast<int64_t>(seq_lens.size()) * shape.num_kv_heads;
  const int64_t tokens = DecodeKvTokens(shape, seq_lens);
  const bool short_work = tokens < int64_t{workers} * kDecodeTileTokens *
                                       kDecodeNarrowTilesPerWorker;
  return pairs < multiprocessors && short_work ? multiprocessors : workers;
}

int64_t DecodeKvTokens(const DecodeShape& shape,
                       absl::Span<const int32_t> seq_lens) {
  int64_t tokens = 0;
  for (int32_t len : seq_lens) tokens += std::max(len, 0);
  return tokens * shape.num_kv_heads;
}

int64_t DecodeEvictFirstMaxTokens(const DecodeShape& shape, int64_t l2_bytes) {
  // K and V bytes of one token of one KV head.
  const int64_t token_bytes = 2 * shape.head_dim * DTypeSize(shape.dtype);
  return kDecodeEvictFirstMaxL2s * l2_bytes / token_bytes;
}

int DecodeHeadGroupFor(const DecodeShape& shape,
                       absl::Span<const int32_t> seq_lens, int workers,
                       bool fits, int forced) {
  if (!fits) return 1;
  if (seq_lens.empty()) return kDecodeHeadGroup;
  if (forced != 0) return forced;
  const int64_t tiles = DecodeKvTokens(shape, seq_lens) / kDecodeTileTokens;
  return tiles >= kDecodeHeadGroupMinTilesPerWorker * workers ? kDecodeHeadGroup
                                                              : 1;
}

bool DecodeHeadGroupsSplit(const DecodeShape& shape,
                           absl::Span<const int32_t> seq_lens, int workers) {
  const int64_t tiles = DecodeKvTokens(shape, seq_lens) / kDecodeTileTokens;
  return tiles >= kDecodeHeadGroupSplitMinTilesPerWorker * workers;
}

int DecodeClusterWorkersFor(const DecodeShape& shape, int64_t bucket, bool tma,
                            int stages, int64_t shared_limit,
                            const DecodeClusterCapacity& capacity, int forced) {
  if (!tma || forced == 1) return 0;
  const int64_t pairs = bucket * shape.num_kv_heads;
  for (const auto& [size, count] :
       {std::pair{16, capacity.of16}, std::pair{8, capacity.of8}}) {
    if (forced != 0 && forced != size) continue;
    const bool fits = DecodeClusterSharedBytes(static_cast<int>(shape.head_dim),
                                               static_cast<int>(shape.group),
                                               stages, size) <= shared_limit;
    if (pairs <= count && fits) return size;
  }
  return 0;
}

}  // namespace tailor::cuda
