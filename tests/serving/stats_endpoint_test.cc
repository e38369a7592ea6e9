// The stats endpoint in process: what each path serves, runtimes sharing an
// endpoint, detaching, address errors, and the counters it exports.
#include <httplib.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<Runtime> MakeRuntime(const std::string& stats_addr) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.log_level = "error";
  options.disable_disk_cache = true;
  options.stats_addr = stats_addr;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? std::move(*runtime) : nullptr;
}

// GET http://address/path: {status, body}; status -1 when nothing answers.
std::pair<int, std::string> Get(const std::string& address,
                                const std::string& path) {
  httplib::Client client("http://" + address);
  client.set_connection_timeout(2, 0);
  httplib::Result result = client.Get(path.c_str());
  if (!result) return {-1, ""};
  return {result->status, result->body};
}

TEST(StatsEndpoint, ServesMetricsStatsAndHealth) {
  std::unique_ptr<Runtime> runtime = MakeRuntime("127.0.0.1:0");
  ASSERT_NE(runtime, nullptr);
  const std::string address = runtime->stats_address();
  ASSERT_THAT(address, HasSubstr("127.0.0.1:"));

  EXPECT_EQ(Get(address, "/healthz"), std::make_pair(200, std::string("ok\n")));
  auto [status, metrics] = Get(address, "/metrics");
  EXPECT_EQ(status, 200);
  EXPECT_THAT(metrics, HasSubstr("# TYPE tailor_kernel_hits_total counter\n"
                                 "tailor_kernel_hits_total{runtime=\"cpu\","
                                 "tier=\"memory\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("tailor_compile_seconds_bucket{runtime="
                                 "\"cpu\",le=\"+Inf\"} 0\n"));
  auto [json_status, json] = Get(address, "/stats");
  EXPECT_EQ(json_status, 200);
  nlohmann::json parsed = nlohmann::json::parse(json);
  EXPECT_EQ(parsed["runtimes"]["cpu"]["lookups"], 0);
  EXPECT_EQ(Get(address, "/nope").first, 404);
}

TEST(StatsEndpoint, RuntimesShareAnAddressAndDetach) {
  std::unique_ptr<Runtime> first = MakeRuntime("127.0.0.1:0");
  ASSERT_NE(first, nullptr);
  const std::string address = first->stats_address();
  std::unique_ptr<Runtime> second = MakeRuntime(address);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->stats_address(), address);
  std::string metrics = Get(address, "/metrics").second;
  EXPECT_THAT(metrics,
              HasSubstr("tailor_kernel_lookups_total{runtime=\"cpu\"}"));
  EXPECT_THAT(metrics,
              HasSubstr("tailor_kernel_lookups_total{runtime=\"cpu#2\"}"));

  first.reset();  // the endpoint stays while a runtime is attached
  metrics = Get(address, "/metrics").second;
  EXPECT_THAT(metrics, Not(HasSubstr("{runtime=\"cpu\"}")));
  EXPECT_THAT(metrics, HasSubstr("{runtime=\"cpu#2\"}"));
  second.reset();  // the last one stops it
  EXPECT_EQ(Get(address, "/healthz").first, -1);
}

TEST(StatsEndpoint, AddressErrors) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.log_level = "error";
  options.stats_addr = "localhost:http";
  EXPECT_THAT(Runtime::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "stats_addr: expected host:port with a port in [0, "
                       "65535], got \"localhost:http\""));
  options.stats_addr = "127.0.0.1:70000";
  EXPECT_THAT(Runtime::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("got \"127.0.0.1:70000\"")));
  options.stats_addr = "192.0.2.1:0";  // TEST-NET: not an address of this host
  EXPECT_THAT(Runtime::Create(options),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("stats_addr: cannot listen on 192.0.2.1:0")));
}

TEST(StatsEndpoint, PortInUseIsUnavailable) {
  httplib::Server other;
  const int port = other.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.log_level = "error";
  options.stats_addr = "127.0.0.1:" + std::to_string(port);
  EXPECT_THAT(Runtime::Create(options),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("cannot listen on 127.0.0.1:" +
                                 std::to_string(port))));
}

TEST(StatsEndpoint, EnvironmentAddress) {
  setenv("TAILOR_STATS_ADDR", "127.0.0.1:0", 1);
  std::unique_ptr<Runtime> runtime = MakeRuntime("");
  unsetenv("TAILOR_STATS_ADDR");
  ASSERT_NE(runtime, nullptr);
  EXPECT_EQ(Get(runtime->stats_address(), "/healthz").first, 200);
  EXPECT_EQ(MakeRuntime("")->stats_address(), "");
}

// $TAILOR_STATS_ADDR belongs to the whole environment (every runtime, every
// tool): an address there that cannot be served is a warning naming the
// variable, not a failed Create; Options::stats_addr still fails (above).
TEST(StatsEndpoint, EnvironmentAddressThatFailsOnlyWarns) {
  httplib::Server other;
  const int port = other.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  const std::string taken = "127.0.0.1:" + std::to_string(port);
  for (const std::string& address : {taken, std::string("localhost:http")}) {
    SCOPED_TRACE(address);
    setenv("TAILOR_STATS_ADDR", address.c_str(), 1);
    Runtime::Options options;
    options.backend = BackendKind::kCpu;
    options.log_level = "warn";
    options.disable_disk_cache = true;
    ::testing::internal::CaptureStderr();
    absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
    const std::string log = ::testing::internal::GetCapturedStderr();
    unsetenv("TAILOR_STATS_ADDR");
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    EXPECT_EQ((*runtime)->stats_address(), "");
    EXPECT_THAT(log, HasSubstr("TAILOR_STATS_ADDR=\"" + address + "\": "));
    EXPECT_THAT(log, HasSubstr("no stats endpoint"));
  }
}

// GET /specializations serves the document tailor-warmup --from-history
// reads; with two runtimes on one address, ?runtime= picks one.
TEST(StatsEndpoint, ServesSpecializationHistory) {
  std::unique_ptr<Runtime> runtime = MakeRuntime("127.0.0.1:0");
  ASSERT_NE(runtime, nullptr);
  const std::string address = runtime->stats_address();
  auto [status, body] = Get(address, "/specializations");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, runtime->SpecializationHistoryJson());
  EXPECT_EQ(nlohmann::json::parse(body)["format"], "tailor.history/1");

  std::unique_ptr<Runtime> second = MakeRuntime(address);
  ASSERT_NE(second, nullptr);
  nlohmann::json both =
      nlohmann::json::parse(Get(address, "/specializations").second);
  EXPECT_EQ(both["runtimes"].size(), 2u);
  EXPECT_EQ(both["runtimes"]["cpu#2"]["format"], "tailor.history/1");
  EXPECT_EQ(Get(address, "/specializations?runtime=cpu%232").second,
            second->SpecializationHistoryJson());
  EXPECT_EQ(Get(address, "/specializations?runtime=cuda:7").first, 404);
}

TEST(StatsEndpoint, ExportsPlanRowsAndWorkspaceBytes) {
  std::unique_ptr<Runtime> runtime = MakeRuntime("127.0.0.1:0");
  ASSERT_NE(runtime, nullptr);
  auto ws = std::make_unique<moe::Workspace>();
  TAILOR_ASSERT_OK(moe::ReserveWorkspace(
      *runtime, {.max_tokens = 8, .topk = 2, .num_experts = 4}, *ws));
  const int64_t held = static_cast<int64_t>(ws->CapacityBytes());
  EXPECT_GT(held, 0);
  EXPECT_EQ(runtime->stats().workspace_bytes, held);
  std::vector<int32_t> ids = {0, 1, 1, 2, 3, 0};  // 3 tokens, k = 2
  TAILOR_ASSERT_OK(moe::Route(
      *runtime,
      {.topk_ids = TensorRef::Contiguous(ids.data(), DType::kI32, {3, 2}),
       .num_experts = 4,
       .policy = {.tile_rows = 4}},
      *ws));
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.plan_useful_rows, 6u);  // counts 2,2,1,1: tails 2,2,1,1
  EXPECT_EQ(s.plan_executed_rows, 6u);
  const std::string metrics = Get(runtime->stats_address(), "/metrics").second;
  EXPECT_THAT(metrics, HasSubstr("tailor_plan_rows_total{runtime=\"cpu\","
                                 "kind=\"useful\"} 6\n"));
  EXPECT_THAT(metrics, HasSubstr("tailor_workspace_bytes{runtime=\"cpu\"} " +
                                 std::to_string(held) + "\n"));
  ws.reset();
  EXPECT_EQ(runtime->stats().workspace_bytes, 0);
}

}  // namespace
}  // namespace tailor
