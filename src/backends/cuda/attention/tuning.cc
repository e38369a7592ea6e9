#include "backends/cuda/attention/tuning.h"

#include "absl/strings/numbers.h"

namespace tailor::cuda {
namespace {

using tailor::internal::Tuning;
using tailor::internal::TuningKnob;
using V = absl::string_view;

constexpr V kWorkersPerSm[] = {"auto", "1", "2", "3", "4"};
constexpr V kStages[] = {"auto", "2", "3", "4"};
constexpr V kHeadGroup[] = {"auto", "1", "4"};
constexpr V kCluster[] = {"auto", "1", "8", "16"};

constexpr TuningKnob kKnobs[] = {
    {"decode.workers_per_sm", kWorkersPerSm,
     "CTAs of decode work per SM (capped at 288 workers)"},
    {"decode.stages", kStages, "pipeline stages, at most what fits"},
    {"decode.head_group", kHeadGroup,
     "never (1) or always (4) 4 KV heads an item where the kernel allows "
     "it; 4 turns cluster launches off"},
    {"decode.cluster", kCluster,
     "never launch in clusters (1), or only in clusters of that size"},
};

// The integer value of `key`; 0 ("auto") when unset.
constexpr V kOnOff[] = {"on", "off"};

constexpr V kDecodeRows[] = {"decode", "prefill"};
constexpr V kRaggedKernel[] = {"auto", "portable"};

constexpr TuningKnob kRaggedKnobs[] = {
    {"ragged.cuda", kOnOff,
     "off: refuse ragged attention on CUDA (Unimplemented at Reserve)"},
    {"ragged.decode_rows", kDecodeRows,
     "where a ragged step's q_len = 1 rows run: the decode kernel, or "
     "prefill tiles"},
    {"ragged.kernel", kRaggedKernel,
     "auto: the sm_90a kernel where it serves the shape, else the portable "
     "one; portable: the mma.sync + cp.async kernel on every device"},
};

int IntOf(const Tuning& tuning, absl::string_view key) {
  int value = 0;
  if (auto text = tuning.Get(key)) {
    if (!absl::SimpleAtoi(*text, &value)) value = 0;
  }
  return value;
}

}  // namespace

absl::Span<const TuningKnob> DecodeTuningKnobs() { return kKnobs; }

DecodeTuning DecodeTuningFrom(const Tuning& tuning) {
  return DecodeTuning{.workers_per_sm = IntOf(tuning, "decode.workers_per_sm"),
                      .stages = IntOf(tuning, "decode.stages"),
                      .head_group = IntOf(tuning, "decode.head_group"),
                      .cluster = IntOf(tuning, "decode.cluster")};
}

absl::Span<const TuningKnob> RaggedTuningKnobs() { return kRaggedKnobs; }

bool RaggedCudaEnabled(const Tuning& tuning) {
  return tuning.Get("ragged.cuda") != "off";
}

bool RaggedPortableForced(const Tuning& tuning) {
  return tuning.Get("ragged.kernel") == "portable";
}

bool RaggedDecodeRowsOnDecodeKernel(const Tuning& tuning) {
  return tuning.Get("ragged.decode_rows") != "prefill";
}

}  // namespace tailor::cuda
