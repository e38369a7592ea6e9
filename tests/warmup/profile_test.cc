// Serving profiles: the shipped examples parse, and every bad field is
// reported with its path and rule (exact messages).
#include "warmup/profile.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "ops/attention/checks.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;

std::string ReadProfile(const std::string& name) {
  std::ifstream in(std::string(TAILOR_PROFILES_DIR) + "/" + name + ".json");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A valid profile with `moe` as its moe section and `extra` appended to the
// top level.
std::string Profile(const std::string& moe, const std::string& extra = "") {
  return R"({"schema": "tailor.profile/1", "name": "t",
             "target": {"backend": "cpu"}, "moe": )" +
         moe + extra + "}";
}

const char kMoe[] =
    R"({"experts": 8, "topk": 2, "hidden": 64, "intermediate": 32,
        "dtypes": ["f32"]})";

void ExpectError(const std::string& json, const std::string& message) {
  EXPECT_THAT(ParseProfile(json),
              StatusIs(absl::StatusCode::kInvalidArgument, message))
      << json;
}

TEST(ProfileTest, ShippedProfilesParse) {
  absl::StatusOr<ServingProfile> qwen =
      ParseProfile(ReadProfile("qwen3-30b-a3b"));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->name, "qwen3-30b-a3b");
  EXPECT_EQ(qwen->backend, BackendKind::kCpu);
  EXPECT_EQ(qwen->arch, "native");
  ASSERT_EQ(qwen->moe.size(), 1u);
  EXPECT_EQ(qwen->moe[0].path, "moe");
  EXPECT_EQ(qwen->moe[0].experts, 128);
  EXPECT_EQ(qwen->moe[0].topk, 8);
  EXPECT_EQ(qwen->moe[0].hidden, 2048);
  EXPECT_EQ(qwen->moe[0].intermediate, 768);
  EXPECT_EQ(qwen->moe[0].dtypes, std::vector<DType>{DType::kBF16});
  ASSERT_EQ(qwen->moe[0].routing.size(), 1u);
  EXPECT_EQ(qwen->moe[0].routing[0].tile_rows, 0);
  EXPECT_EQ(qwen->moe[0].routing[0].tail, moe::TailPolicy::kNextPowerOfTwo);
  ASSERT_EQ(qwen->paged_decode.size(), 1u);
  EXPECT_EQ(qwen->paged_decode[0].heads_kv, 4);
  // vLLM's CUDA-graph sizes: [1, 2, 4] + 8..248 step 8 + 256..512 step 16.
  EXPECT_EQ(qwen->batch_buckets.size(), 3u + 31u + 17u);
  EXPECT_EQ(qwen->batch_buckets.back(), 512);
  for (const char* name :
       {"llama-3-8b", "mixtral-8x7b", "deepseek-v3", "deepseek-v3-fp8"}) {
    absl::StatusOr<ServingProfile> p = ParseProfile(ReadProfile(name));
    EXPECT_TRUE(p.ok()) << name << ": " << p.status();
  }
}

TEST(ProfileTest, DefaultsAndArrays) {
  absl::StatusOr<ServingProfile> p = ParseProfile(Profile(
      std::string("[") + kMoe + R"(, {"experts": 4, "topk": 1, "hidden": 8,
        "intermediate": 8, "dtypes": ["bf16", "f32"],
        "routing": [{"tile_rows": 8, "tail": "exact"},
                    {"tile_rows": 4, "tail": "full"}]}])"));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->moe.size(), 2u);
  EXPECT_EQ(p->moe[1].path, "moe[1]");
  ASSERT_EQ(p->moe[0].routing.size(), 1u);       // the default policy
  EXPECT_EQ(p->moe[0].routing[0].tile_rows, 0);  // the backend's choice
  EXPECT_EQ(p->moe[1].routing[1].tail, moe::TailPolicy::kFullTile);
  EXPECT_TRUE(p->batch_buckets.empty());
}

TEST(ProfileTest, NotJsonOrNotAnObject) {
  EXPECT_THAT(ParseProfile("{\"schema\": "),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("profile: not valid JSON: ")));
  ExpectError("[1, 2]", "profile: document: must be an object, got [1,2]");
}

TEST(ProfileTest, TopLevelFields) {
  ExpectError(R"({"schema": "tailor.profile/2", "name": "t",
                  "target": {"backend": "cpu"}, "moe": )" +
                  std::string(kMoe) + "}",
              "profile: schema: must be \"tailor.profile/1\", got "
              "\"tailor.profile/2\"");
  ExpectError(R"({"name": "t", "target": {"backend": "cpu"}})",
              "profile: schema: missing");
  ExpectError(R"({"schema": "tailor.profile/1", "name": "t",
                  "target": {"backend": "cpu"}})",
              "profile: needs at least one op section (moe, paged_decode)");
  ExpectError(Profile(kMoe, R"(, "batch_bucket": [1])"),
              "profile: batch_bucket: unknown field (known: schema, name, "
              "description, target, batch_buckets, tuning, moe, "
              "paged_decode)");
}

// "tuning": the server's tuning keys, checked as Runtime::Create checks
// them and kept in canonical form.
TEST(ProfileTest, Tuning) {
  absl::StatusOr<ServingProfile> tuned = ParseProfile(
      Profile(kMoe, R"(, "tuning": "moe.wave_sync=on, moe.cluster=2")"));
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->tuning, "moe.cluster=2,moe.wave_sync=on");
  absl::StatusOr<ServingProfile> plain = ParseProfile(Profile(kMoe));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->tuning, "");
  ExpectError(Profile(kMoe, R"(, "tuning": "moe.cluster=3")"),
              "profile: tuning: moe.cluster: must be one of 1, 2, 4, got "
              "\"3\"");
}

TEST(ProfileTest, Target) {
  ExpectError(R"({"schema": "tailor.profile/1", "name": "t", "moe": )" +
                  std::string(kMoe) + "}",
              "profile: target: missing");
  ExpectError(R"({"schema": "tailor.profile/1", "name": "t",
                  "target": {"backend": "tpu", "arch": ""}, "moe": )" +
                  std::string(kMoe) + "}",
              "profile: target.backend: must be one of cpu, cuda; got "
              "\"tpu\"; target.arch: must not be empty (use \"native\")");
}

TEST(ProfileTest, BatchBuckets) {
  ExpectError(Profile(kMoe, R"(, "batch_buckets": [1, 8, 8, 0, "16"])"),
              "profile: batch_buckets[2]: must be greater than 8 (strictly "
              "increasing), got 8; batch_buckets[3]: must be an integer in "
              "[1, 2147483647], got 0; batch_buckets[4]: must be an integer "
              "in [1, 2147483647], got \"16\"");
  ExpectError(Profile(kMoe, R"(, "batch_buckets": [])"),
              "profile: batch_buckets: must not be empty");
}

TEST(ProfileTest, MoeFields) {
  ExpectError(Profile(R"({"experts": 8, "topk": 2, "hidden": "2048",
                          "intermediate": 32, "dtypes": ["f32"]})"),
              "profile: moe.hidden: must be an integer in [1, 65536], got "
              "\"2048\"");
  ExpectError(Profile(R"({"experts": 8, "topk": 2, "hiden": 64,
                          "intermediate": 32, "dtypes": ["f32"]})"),
              "profile: moe.hidden: missing; moe.hiden: unknown field "
              "(known: experts, topk, hidden, intermediate, dtypes, "
              "activation, routing)");
  ExpectError(Profile(R"({"experts": 0, "topk": 65, "hidden": 1.5,
                          "intermediate": 70000, "dtypes": ["f32"]})"),
              "profile: moe.experts: must be an integer in [1, 1048576], got "
              "0; moe.topk: must be an integer in [1, 64], got 65; "
              "moe.hidden: must be an integer in [1, 65536], got 1.5; "
              "moe.intermediate: must be an integer in [1, 65536], got 70000");
  ExpectError(Profile(R"({"experts": 8, "topk": 2, "hidden": 64,
                          "intermediate": 32, "dtypes": ["f32", "fp8", "f32"],
                          "activation": "gelu"})"),
              "profile: moe.dtypes[1]: must be one of bf16, f32, f8e4m3; got "
              "\"fp8\"; "
              "moe.dtypes[2]: repeats \"f32\"; moe.activation: must be one "
              "of silu; got \"gelu\"");
  ExpectError(Profile(R"({"experts": 8, "topk": 2, "hidden": 64,
                          "intermediate": 32, "dtypes": []})"),
              "profile: moe.dtypes: must not be empty");
  ExpectError(Profile(R"({"experts": 8, "topk": 2, "hidden": 256,
                          "intermediate": 96, "dtypes": ["bf16", "f8e4m3"]})"),
              "profile: moe.intermediate: must be a multiple of 128 for "
              "f8e4m3 (128 x 128 block scales), got 96");
  ExpectError(Profile("[]"), "profile: moe: must not be an empty array");
  ExpectError(Profile("[7]"), "profile: moe[0]: must be an object, got 7");
}

TEST(ProfileTest, RoutingFields) {
  ExpectError(Profile(R"({"experts": 8, "topk": 2, "hidden": 64,
                          "intermediate": 32, "dtypes": ["f32"],
                          "routing": [{"tile_rows": 129, "tail": "pow3"},
                                      {"tile_rows": 16, "tail": "exact",
                                       "tile": 3}]})"),
              "profile: moe.routing[0].tile_rows: must be an integer in [0, "
              "128], got 129; moe.routing[0].tail: must be one of pow2, exact, "
              "full; got \"pow3\"; moe.routing[1].tile: unknown field "
              "(known: tile_rows, tail)");
}

TEST(ProfileTest, PagedDecodeFields) {
  ExpectError(R"({"schema": "tailor.profile/1", "name": "t",
                  "target": {"backend": "cuda", "arch": "sm_90a"},
                  "paged_decode": {"heads_q": 32, "heads_kv": 5,
                                   "head_dim": 0, "page_size": 16,
                                   "dtypes": ["bf16", "i32"]}})",
              "profile: paged_decode.head_dim: must be an integer in [1, "
              "2147483647], got 0; paged_decode.dtypes[1]: must be one of "
              "bf16, f16, f32; got \"i32\"");
  ExpectError(R"({"schema": "tailor.profile/1", "name": "t",
                  "target": {"backend": "cuda", "arch": "sm_90a"},
                  "paged_decode": {"heads_q": 32, "heads_kv": 5,
                                   "head_dim": 128, "page_size": 16,
                                   "dtypes": ["bf16"]}})",
              "profile: paged_decode.heads_q: must be in [1, 1024] and a "
              "multiple of heads_kv (5), got 32");
}

// ragged_masks: the layer's ragged-attention masks (default: causal; []:
// decode only), each named once.
TEST(ProfileTest, PagedDecodeRaggedMasks) {
  auto section = [](absl::string_view masks) {
    return absl::StrCat(
        R"({"schema": "tailor.profile/1", "name": "t",
            "target": {"backend": "cpu"},
            "paged_decode": {"heads_q": 32, "heads_kv": 8, "head_dim": 128,
                             "page_size": 16, "dtypes": ["bf16"])",
        masks, "}}");
  };
  absl::StatusOr<ServingProfile> plain = ParseProfile(section(""));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(plain->paged_decode[0].ragged_masks,
              ::testing::ElementsAre(RaggedMask::kCausal));
  absl::StatusOr<ServingProfile> all =
      ParseProfile(section(R"(, "ragged_masks": ["window", "none"])"));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(
      all->paged_decode[0].ragged_masks,
      ::testing::ElementsAre(RaggedMask::kCausalWindow, RaggedMask::kNone));
  absl::StatusOr<ServingProfile> none =
      ParseProfile(section(R"(, "ragged_masks": [])"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->paged_decode[0].ragged_masks.empty());
  ExpectError(section(R"(, "ragged_masks": ["causal", "sliding", "causal"])"),
              "profile: paged_decode.ragged_masks[1]: must be one of none, "
              "causal, window; got \"sliding\"; "
              "paged_decode.ragged_masks[2]: repeats \"causal\"");
  ExpectError(section(R"(, "ragged_masks": "causal")"),
              "profile: paged_decode.ragged_masks: must be an array, got "
              "\"causal\"");
}

// A paged_decode section with `fields` (heads_q, heads_kv, head_dim,
// page_size).
std::string DecodeProfile(int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                          int64_t page_size) {
  return absl::StrCat(
      R"({"schema": "tailor.profile/1", "name": "t",
          "target": {"backend": "cuda", "arch": "sm_90a"},
          "paged_decode": {"heads_q": )",
      heads_q, R"(, "heads_kv": )", heads_kv, R"(, "head_dim": )", head_dim,
      R"(, "page_size": )", page_size, R"(, "dtypes": ["bf16", "f32"]}})");
}

// Shapes the runtime refuses used to pass the profile: head_dim 100 and a
// GQA group of 32 then failed to compile (exit 1), page_size 1000 compiled a
// kernel no launch can use, topk 64 of 8 experts compiled combine kernels no
// model needs. The profile now applies the op fronts' own rules.
TEST(ProfileTest, ShapesTheRuntimeRefusesAreRefused) {
  ExpectError(DecodeProfile(32, 8, 100, 16),
              "profile: paged_decode.head_dim: must be 64, 128 or 256, got "
              "100");
  ExpectError(DecodeProfile(256, 8, 128, 16),
              "profile: paged_decode.heads_q: heads_q / heads_kv (the GQA "
              "group) must be <= 16, got 32");
  ExpectError(DecodeProfile(32, 8, 128, 1000),
              "profile: paged_decode.page_size: must be in [1, 256], got 1000");
  ExpectError(Profile(R"({"experts": 8, "topk": 64, "hidden": 64,
                          "intermediate": 32, "dtypes": ["f32"]})"),
              "profile: moe.topk: must be at most experts (8): a token is "
              "routed to k distinct experts, got 64");
  EXPECT_TRUE(ParseProfile(Profile(R"({"experts": 8, "topk": 8, "hidden": 64,
                                       "intermediate": 32,
                                       "dtypes": ["f32"]})"))
                  .ok());
}

// One definition: over a sweep of shapes, a paged_decode section parses
// exactly when the op front's CheckDecodeShape accepts the shape.
TEST(ProfileTest, DecodeSectionsFollowTheOpFrontsRule) {
  int accepted = 0;
  for (int64_t heads_kv : {1, 3, 8, 1024}) {
    for (int64_t group : {1, 2, 7, 16, 17, 32}) {
      for (int64_t head_dim : {1, 63, 64, 100, 128, 256, 512}) {
        for (int64_t page_size : {1, 5, 16, 64, 256, 257, 1000}) {
          const int64_t heads_q = heads_kv * group;
          const bool runtime_ok = CheckDecodeShape({.num_qo_heads = heads_q,
                                                    .num_kv_heads = heads_kv,
                                                    .head_dim = head_dim,
                                                    .page_size = page_size,
                                                    .dtype = DType::kBF16},
                                                   "")
                                      .ok();
          absl::StatusOr<ServingProfile> p = ParseProfile(
              DecodeProfile(heads_q, heads_kv, head_dim, page_size));
          EXPECT_EQ(p.ok(), runtime_ok)
              << heads_q << "/" << heads_kv << " D=" << head_dim
              << " page=" << page_size << ": " << p.status();
          accepted += p.ok();
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace tailor::internal
