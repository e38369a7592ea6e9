// The tuning channel: the parser, the families' knob tables and typed
// structs, and a Runtime's Options::tuning / $TAILOR_TUNING.
#include "core/tuning.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>
#include <string>

#include "backends/cuda/attention/tuning.h"
#include "backends/cuda/moe/tuning.h"
#include "core/family_registry.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr absl::string_view kSizes[] = {"1", "2", "4"};
constexpr absl::string_view kAutoOffOn[] = {"auto", "off", "on"};
constexpr TuningKnob kKnobs[] = {{"f.size", kSizes, "a size"},
                                 {"f.mode", kAutoOffOn, "a switch"}};

TEST(TuningTest, ParsesSortsAndPrintsCanonically) {
  absl::StatusOr<Tuning> t = ParseTuning(" f.size = 4 ,, f.mode=on ", kKnobs);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->entries(),
              ElementsAre(Pair("f.mode", "on"), Pair("f.size", "4")));
  EXPECT_EQ(t->ToString(), "f.mode=on,f.size=4");
  EXPECT_EQ(t->Get("f.size"), "4");
  EXPECT_EQ(t->Get("f.other"), std::nullopt);
  absl::StatusOr<Tuning> again = ParseTuning(t->ToString(), kKnobs);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->entries(), t->entries());
  absl::StatusOr<Tuning> none = ParseTuning("", kKnobs);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(none->ToString(), "");
}

TEST(TuningTest, RejectsEveryMistakeNamingTheKey) {
  EXPECT_THAT(ParseTuning("f.size", kKnobs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"f.size\": expected key=value"));
  EXPECT_THAT(ParseTuning("f.sise=2", kKnobs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown key \"f.sise\"; known keys: f.mode, f.size"));
  EXPECT_THAT(ParseTuning("f.size=3", kKnobs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.size: must be one of 1, 2, 4, got \"3\""));
  EXPECT_THAT(ParseTuning("f.mode=", kKnobs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.mode: must be one of auto, off, on, got \"\""));
  EXPECT_THAT(
      ParseTuning("f.size=2,f.size=2", kKnobs),
      StatusIs(absl::StatusCode::kInvalidArgument, "f.size: set twice"));
}

TEST(TuningTest, SwitchesDecide) {
  EXPECT_EQ(SwitchOf(std::nullopt), Switch::kAuto);
  EXPECT_EQ(SwitchOf("off"), Switch::kOff);
  EXPECT_EQ(SwitchOf("on"), Switch::kOn);
  EXPECT_TRUE(Decide(Switch::kAuto, true));
  EXPECT_FALSE(Decide(Switch::kAuto, false));
  EXPECT_FALSE(Decide(Switch::kOff, true));
  EXPECT_TRUE(Decide(Switch::kOn, false));
}

// Every family's keys: unique, "<family>.<knob>", at least two values.
TEST(TuningTest, EveryKeyIsDeclaredOnce) {
  std::set<absl::string_view> keys;
  for (const TuningKnob& knob : AllTuningKnobs()) {
    EXPECT_TRUE(keys.insert(knob.key).second) << knob.key;
    EXPECT_NE(knob.key.find('.'), absl::string_view::npos) << knob.key;
    EXPECT_GE(knob.values.size(), 2u) << knob.key;
    EXPECT_FALSE(knob.help.empty()) << knob.key;
  }
  EXPECT_THAT(
      keys,
      ElementsAre("decode.cluster", "decode.head_group", "decode.stages",
                  "decode.workers_per_sm", "moe.cluster", "moe.consumers",
                  "moe.expert_groups", "moe.gemm", "moe.pdl", "moe.prefetch_w",
                  "moe.schedule", "moe.split_k", "moe.store", "moe.swap_ab",
                  "moe.w_evict_first", "moe.wave_sync", "ragged.cuda",
                  "ragged.decode_rows", "ragged.kernel"));
}

TEST(TuningTest, MoeKeysFillTheCudaStruct) {
  const cuda::MoeTuning defaults = cuda::MoeTuningFrom(Tuning());
  EXPECT_FALSE(defaults.portable_gemm);
  EXPECT_EQ(defaults.cluster, 1);
  EXPECT_EQ(defaults.expert_groups, cuda::MoeExpertGroups::kAuto);
  EXPECT_EQ(defaults.wave_sync, Switch::kAuto);
  EXPECT_EQ(defaults.pingpong, Switch::kAuto);
  EXPECT_TRUE(defaults.swap_ab && defaults.tma_store && defaults.split_k &&
              defaults.dynamic_schedule && defaults.pdl);
  absl::StatusOr<Tuning> t = ParseTuningText(
      "moe.gemm=portable,moe.cluster=4,moe.expert_groups=back,"
      "moe.wave_sync=on,moe.w_evict_first=off,moe.prefetch_w=on,"
      "moe.swap_ab=off,moe.store=registers,moe.split_k=off,"
      "moe.schedule=static,moe.pdl=off,moe.consumers=pingpong");
  ASSERT_TRUE(t.ok()) << t.status();
  const cuda::MoeTuning m = cuda::MoeTuningFrom(*t);
  EXPECT_EQ(m.pingpong, Switch::kOn);
  absl::StatusOr<Tuning> cooperative =
      ParseTuningText("moe.consumers=cooperative");
  ASSERT_TRUE(cooperative.ok()) << cooperative.status();
  EXPECT_EQ(cuda::MoeTuningFrom(*cooperative).pingpong, Switch::kOff);
  EXPECT_TRUE(m.portable_gemm);
  EXPECT_EQ(m.cluster, 4);
  EXPECT_EQ(m.expert_groups, cuda::MoeExpertGroups::kBack);
  EXPECT_EQ(m.wave_sync, Switch::kOn);
  EXPECT_EQ(m.w_evict_first, Switch::kOff);
  EXPECT_EQ(m.prefetch_w, Switch::kOn);
  EXPECT_FALSE(m.swap_ab || m.tma_store || m.split_k || m.dynamic_schedule ||
               m.pdl);
}

TEST(TuningTest, DecodeKeysFillTheCudaStruct) {
  const cuda::DecodeTuning defaults = cuda::DecodeTuningFrom(Tuning());
  EXPECT_EQ(defaults.workers_per_sm, 0);
  EXPECT_EQ(defaults.stages, 0);
  EXPECT_EQ(defaults.head_group, 0);
  EXPECT_EQ(defaults.cluster, 0);
  absl::StatusOr<Tuning> t = ParseTuningText(
      "decode.workers_per_sm=2,decode.stages=3,decode.head_group=4,"
      "decode.cluster=16");
  ASSERT_TRUE(t.ok()) << t.status();
  const cuda::DecodeTuning d = cuda::DecodeTuningFrom(*t);
  EXPECT_EQ(d.workers_per_sm, 2);
  EXPECT_EQ(d.stages, 3);
  EXPECT_EQ(d.head_group, 4);
  EXPECT_EQ(d.cluster, 16);
  EXPECT_THAT(ParseTuningText("decode.head_group=2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "decode.head_group: must be one of auto, 1, 4, got "
                       "\"2\""));
  EXPECT_THAT(ParseTuningText("decode.stages=deep"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "decode.stages: must be one of auto, 2, 3, 4, got "
                       "\"deep\""));
}

TEST(TuningTest, RaggedKernelKeyForcesThePortableKernel) {
  EXPECT_FALSE(cuda::RaggedPortableForced(Tuning()));
  absl::StatusOr<Tuning> automatic = ParseTuningText("ragged.kernel=auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_FALSE(cuda::RaggedPortableForced(*automatic));
  absl::StatusOr<Tuning> portable = ParseTuningText("ragged.kernel=portable");
  ASSERT_TRUE(portable.ok()) << portable.status();
  EXPECT_TRUE(cuda::RaggedPortableForced(*portable));
  EXPECT_THAT(ParseTuningText("ragged.kernel=sm80"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "ragged.kernel: must be one of auto, portable, got "
                       "\"sm80\""));
}

Runtime::Options CpuOptions() {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  options.cpu_threads = 1;
  return options;
}

// $TAILOR_TUNING set for one scope.
class ScopedTuningEnv {
 public:
  explicit ScopedTuningEnv(const char* value) {
    ::setenv("TAILOR_TUNING", value, 1);
  }
  ~ScopedTuningEnv() { ::unsetenv("TAILOR_TUNING"); }
};

TEST(RuntimeTuningTest, BadTuningFailsCreateNamingItsOrigin) {
  Runtime::Options options = CpuOptions();
  options.tuning = "moe.cluster=3";
  EXPECT_THAT(Runtime::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tuning: moe.cluster: must be one of 1, 2, 4, got "
                       "\"3\""));
  ScopedTuningEnv env("moe.clusters=2");
  EXPECT_THAT(Runtime::Create(CpuOptions()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("TAILOR_TUNING: unknown key "
                                 "\"moe.clusters\"; known keys: ")));
}

TEST(RuntimeTuningTest, OverridesShowInStats) {
  Runtime::Options options = CpuOptions();
  options.tuning = "moe.cluster=2,decode.stages=3";
  ScopedTuningEnv env("moe.cluster=4");  // the option wins
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_EQ((*runtime)->tuning(), "decode.stages=3,moe.cluster=2");
  const StatsSnapshot stats = (*runtime)->stats();
  EXPECT_THAT(stats.tuning, ElementsAre(Pair("decode.stages", "3"),
                                        Pair("moe.cluster", "2")));
  EXPECT_THAT(stats.ToJson(), HasSubstr("\"moe.cluster\": \"2\""));
  EXPECT_THAT(stats.ToPrometheus(),
              HasSubstr("tailor_tuning_override{key=\"moe.cluster\","
                        "value=\"2\"} 1\n"));
}

TEST(RuntimeTuningTest, EnvironmentIsTheFallback) {
  ScopedTuningEnv env("moe.gemm=portable");
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(CpuOptions());
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_EQ((*runtime)->tuning(), "moe.gemm=portable");
}

TEST(RuntimeTuningTest, MoePlanSummaryNamesTheMoeKeys) {
  Runtime::Options options = CpuOptions();
  options.tuning = "decode.stages=3,moe.cluster=2";
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  int32_t ids[4] = {0, 1, 1, 0};
  moe::Workspace ws;
  ASSERT_TRUE(
      moe::Route(**runtime,
                 {.topk_ids = TensorRef::Contiguous(ids, DType::kI32, {2, 2}),
                  .num_experts = 2},
                 ws)
          .ok());
  EXPECT_EQ(ws.plan().tuning, "moe.cluster=2");
  EXPECT_THAT(ws.plan().ToString(), HasSubstr(" tuning=moe.cluster=2"));
  absl::StatusOr<std::unique_ptr<Runtime>> plain =
      Runtime::Create(CpuOptions());
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(
      moe::Route(**plain,
                 {.topk_ids = TensorRef::Contiguous(ids, DType::kI32, {2, 2}),
                  .num_experts = 2},
                 ws)
          .ok());
  EXPECT_THAT(ws.plan().tuning, IsEmpty());
}

}  // namespace
}  // namespace tailor::internal
