// History documents: the format round-trips every key field, is sorted and
// versioned, and a bad document names the field.
#include "warmup/history.h"

#include "nlohmann/json.hpp"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;

SpecKey GemmKey(int32_t tail_class) {
  SpecKey key = {
      .op = OpKind::kMoeGroupedGemm,
      .backend = BackendKind::kCpu,
      .dtypes = {DType::kBF16, DType::kBF16, DType::kF32},
      .dims = {1536, 2048},
      .bucket_id = 3,
      .tail_class = tail_class,
      .tile =
          {.m = 16, .n = 32, .k = 64, .stages = 4, .warps = 8, .cluster = 2},
      .variant = 1};
  key.SetArch("x86_64-znver3");
  return key;
}

TEST(HistoryTest, RoundTripsEveryKeyField) {
  History history = {.tailor_version = "0.1.0",
                     .backend = BackendKind::kCpu,
                     .arch = "x86_64-znver3",
                     .keys = {GemmKey(8), GemmKey(0)}};
  SpecKey pack = {
      .op = OpKind::kMoePack, .dtypes = {DType::kF32}, .dims = {64}};
  pack.SetArch("x86_64-znver3");
  history.keys.push_back(pack);
  std::string json = HistoryToJson(history);
  absl::StatusOr<History> parsed = ParseHistory(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tailor_version, "0.1.0");
  EXPECT_EQ(parsed->backend, BackendKind::kCpu);
  EXPECT_EQ(parsed->arch, "x86_64-znver3");
  // Sorted by readable key: grouped_gemm t0, t8, then pack.
  ASSERT_EQ(parsed->keys.size(), 3u);
  EXPECT_EQ(parsed->keys[0], GemmKey(0));
  EXPECT_EQ(parsed->keys[1], GemmKey(8));
  EXPECT_EQ(parsed->keys[2], pack);

  nlohmann::json doc = nlohmann::json::parse(json);
  EXPECT_EQ(doc["format"], "tailor.history/1");
  EXPECT_EQ(doc["specializations"][2]["dims"], nlohmann::json({64}));
  EXPECT_EQ(doc["specializations"][2]["key"],
            "moe.pack/cpu/x86_64-znver3/f32/H=64/b0/t0/m0n0k0");
}

TEST(HistoryTest, ReadableKeyIsNotTrusted) {
  History history = {.tailor_version = "0.1.0",
                     .backend = BackendKind::kCpu,
                     .arch = "x86_64-znver3",
                     .keys = {GemmKey(4)}};
  nlohmann::json doc = nlohmann::json::parse(HistoryToJson(history));
  doc["specializations"][0]["key"] = "whatever an older tailor printed";
  absl::StatusOr<History> parsed = ParseHistory(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->keys[0], GemmKey(4));
}

TEST(HistoryTest, BadFieldsAreNamed) {
  EXPECT_THAT(ParseHistory(R"({"format": "tailor.history/9",
      "tailor_version": "0.1.0", "backend": "tpu", "arch": "a",
      "specializations": [
        {"op": "moe.nope", "dtypes": ["bf17"], "dims": [1, -2], "bucket_id": 0,
         "tail_class": 0, "tile": {"m": 16, "q": 1}, "variant": 0},
        {"op": "moe.pack", "dtypes": ["f32"], "dims": [1, 2, 3, 4, 5, 6, 7],
         "bucket_id": 0, "tail_class": 0, "tile": {}, "variant": -1,
         "extra": true}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "history: format: must be \"tailor.history/1\", got "
                       "\"tailor.history/9\"; backend: must be one of cpu, "
                       "cuda, hip; got \"tpu\"; specializations[0].op: "
                       "unknown op \"moe.nope\"; specializations[0].dtypes[0]: "
                       "unknown dtype \"bf17\"; specializations[0].dims[1]: "
                       "must be an integer in [0, 9223372036854775807], got "
                       "-2; specializations[0].tile.q: unknown field (known: "
                       "m, n, k, stages, warps, cluster); "
                       "specializations[1].dims: has 7 entries; at most 6; "
                       "specializations[1].variant: must be an integer in [0, "
                       "4294967295], got -1; specializations[1].extra: "
                       "unknown field (known: key, op, dtypes, dims, "
                       "bucket_id, tail_class, tile, variant)"));
  EXPECT_THAT(ParseHistory("not json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("history: not valid JSON: ")));
  EXPECT_THAT(ParseHistory(R"({"format": "tailor.history/1"})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "history: tailor_version: missing; backend: missing; "
                       "arch: missing; specializations: missing"));
}

// GET /specializations of an endpoint that serves several runtimes wraps
// their documents: runtimes of one backend and arch are merged, others need
// a name (tailor-warmup --runtime).
TEST(HistoryTest, EndpointAnswerForSeveralRuntimes) {
  History cpu = {.tailor_version = "0.1.0",
                 .backend = BackendKind::kCpu,
                 .arch = "x86_64-znver3",
                 .keys = {GemmKey(4), GemmKey(8)}};
  History second = cpu;
  second.keys = {GemmKey(0), GemmKey(8)};
  History cuda = {.tailor_version = "0.1.0",
                  .backend = BackendKind::kCuda,
                  .arch = "sm_90a",
                  .keys = {}};
  auto document = [](const History& h) {
    return nlohmann::json::parse(HistoryToJson(h));
  };
  nlohmann::json same = {
      {"runtimes", {{"cpu", document(cpu)}, {"cpu#2", document(second)}}}};
  nlohmann::json mixed = {
      {"runtimes", {{"cpu", document(cpu)}, {"cuda:0", document(cuda)}}}};

  absl::StatusOr<History> merged = ParseHistory(same.dump());
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->backend, BackendKind::kCpu);
  EXPECT_EQ(merged->keys.size(), 3u);  // t4, t8 and t0; t8 once
  absl::StatusOr<History> picked = ParseHistory(same.dump(), "cpu#2");
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(picked->keys.size(), 2u);
  absl::StatusOr<History> gpu = ParseHistory(mixed.dump(), "cuda:0");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->backend, BackendKind::kCuda);

  EXPECT_THAT(ParseHistory(mixed.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "history: the runtimes ran on different backends or "
                       "archs (cpu: cpu x86_64-znver3, cuda:0: cuda sm_90a); "
                       "pick one with --runtime NAME, or fetch "
                       "/specializations?runtime=NAME"));
  EXPECT_THAT(ParseHistory(same.dump(), "cuda:0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "history: no runtime \"cuda:0\" (cpu, cpu#2); pick "
                       "one with --runtime NAME, or fetch "
                       "/specializations?runtime=NAME"));
  EXPECT_THAT(ParseHistory(HistoryToJson(cpu), "cpu"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("history: runtime \"cpu\" asked for, but "
                                 "the document is one runtime's history")));
  EXPECT_THAT(ParseHistory(R"({"runtimes": {}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "history: runtimes: holds no runtime"));
  nlohmann::json bad = same;
  bad["runtimes"]["cpu#2"]["backend"] = "tpu";
  EXPECT_THAT(ParseHistory(bad.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("(runtime \"cpu#2\")")));
}

}  // namespace
}  // namespace tailor::internal
