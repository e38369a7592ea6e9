#include "backends/cuda/moe/tuning.h"

#include "core/env.h"

namespace tailor::cuda {
namespace {

using tailor::internal::SwitchOf;
using tailor::internal::Tuning;
using tailor::internal::TuningKnob;
using V = absl::string_view;

constexpr V kGemm[] = {"auto", "portable"};
constexpr V kCluster[] = {"1", "2", "4"};
constexpr V kExpertGroups[] = {"auto", "off", "forward", "back"};
constexpr V kAutoOffOn[] = {"auto", "off", "on"};
constexpr V kOnOff[] = {"on", "off"};
constexpr V kStore[] = {"tma", "registers"};
constexpr V kSchedule[] = {"dynamic", "static"};
constexpr V kConsumers[] = {"auto", "cooperative", "pingpong"};

constexpr TuningKnob kKnobs[] = {
    {"moe.gemm", kGemm,
     "portable: the mma.sync (or SIMT) grouped GEMM on Hopper too"},
    {"moe.cluster", kCluster,
     "every 128-row Hopper launch in clusters of that many CTAs, sharing W "
     "(and with 4, A) tiles by TMA multicast"},
    {"moe.expert_groups", kExpertGroups,
     "raster group bounds: fixed groups of 8 items (off), moved forward or "
     "back to expert starts"},
    {"moe.wave_sync", kAutoOffOn, "Hopper tiles in waves that start together"},
    {"moe.w_evict_first", kAutoOffOn,
     "W streamed with an L2 evict-first policy (launches without clusters)"},
    {"moe.prefetch_w", kAutoOffOn,
     "W pulled into the L2 before the predecessor ends (launches without "
     "clusters)"},
    {"moe.swap_ab", kOnOff,
     "off: decode steps run the 64-row Hopper kernel instead of swap-AB"},
    {"moe.store", kStore,
     "registers: the Hopper GEMM stores every tile from registers"},
    {"moe.split_k", kOnOff, "off: the Hopper GEMM never splits K"},
    {"moe.schedule", kSchedule,
     "static: Hopper CTAs walk tiles by fixed strides"},
    {"moe.consumers", kConsumers,
     "Hopper consumer warpgroups of 128-row launches: both on one tile "
     "(cooperative, also what auto runs) or a tile each, taking turns "
     "(pingpong)"},
    {"moe.pdl", kOnOff,
     "off: no MoE launch overlaps its predecessor (programmatic dependent "
     "launch)"},
};

}  // namespace

absl::Span<const TuningKnob> MoeTuningKnobs() { return kKnobs; }

MoeTuning MoeTuningFrom(const Tuning& tuning) {
  MoeTuning t;
  t.portable_gemm = tuning.Get("moe.gemm") == "portable";
  if (auto cluster = tuning.Get("moe.cluster")) {
    t.cluster = *cluster == "4" ? 4 : *cluster == "2" ? 2 : 1;
  }
  const auto groups = tuning.Get("moe.expert_groups");
  t.expert_groups = groups == "off"       ? MoeExpertGroups::kFixed
                    : groups == "forward" ? MoeExpertGroups::kForward
                    : groups == "back"    ? MoeExpertGroups::kBack
                                          : MoeExpertGroups::kAuto;
  t.wave_sync = SwitchOf(tuning.Get("moe.wave_sync"));
  t.w_evict_first = SwitchOf(tuning.Get("moe.w_evict_first"));
  t.prefetch_w = SwitchOf(tuning.Get("moe.prefetch_w"));
  t.swap_ab = tuning.Get("moe.swap_ab") != "off";
  t.tma_store = tuning.Get("moe.store") != "registers";
  t.split_k = tuning.Get("moe.split_k") != "off";
  t.dynamic_schedule = tuning.Get("moe.schedule") != "static";
  const auto consumers = tuning.Get("moe.consumers");
  t.pingpong = consumers == "pingpong"      ? tailor::internal::Switch::kOn
               : consumers == "cooperative" ? tailor::internal::Switch::kOff
                                            : tailor::internal::Switch::kAuto;
  t.pdl = tuning.Get("moe.pdl") != "off";
  t.pipeline_checks =
      tailor::internal::EnvIs("TAILOR_CUDA_PIPELINE_CHECKS", "1");
  return t;
}

}  // namespace tailor::cuda
