// The stats endpoint on cpp-httplib (Debian's libcpp-httplib).
#include "serving/stats_endpoint.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/logging.h"
#include "nlohmann/json.hpp"

namespace tailor::internal {
namespace {

constexpr int kServerThreads = 2;
constexpr char kPrometheusType[] = "text/plain; version=0.0.4; charset=utf-8";

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseAddress(absl::string_view address) {
  HostPort out{.host = "127.0.0.1"};
  absl::string_view port = address;
  const size_t colon = address.rfind(':');
  if (colon != absl::string_view::npos) {
    if (colon > 0) out.host = std::string(address.substr(0, colon));
    port = address.substr(colon + 1);
  }
  if (out.host.size() > 2 && out.host.front() == '[' &&
      out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);  // [::1]
  }
  if (!absl::SimpleAtoi(port, &out.port) || out.port < 0 || out.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stats_addr: expected host:port with a port in [0, 65535], got \"",
        address, "\""));
  }
  return out;
}

class Endpoint;

// Every live endpoint, by the address it listens on.
absl::Mutex registry_mu;
std::map<std::string, Endpoint*>& Registry() {
  static auto* endpoints = new std::map<std::string, Endpoint*>();
  return *endpoints;
}

class Endpoint {
 public:
  struct Source {
    int id;
    std::string name;
    std::function<StatsSnapshot()> snapshot;
  };

  // Binds `where`; the server thread starts with Start().
  static absl::StatusOr<std::unique_ptr<Endpoint>> Bind(const HostPort& where) {
    auto endpoint = std::unique_ptr<Endpoint>(new Endpoint());
    httplib::Server& server = endpoint->server_;
    server.new_task_queue = [] {
      return new httplib::ThreadPool(kServerThreads);
    };
    // SO_REUSEADDR only, not httplib's default SO_REUSEPORT: a port another
    // process listens on must be an error, not silently shared with it.
    server.set_socket_options([](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    server.set_tcp_nodelay(true);  // else Nagle + delayed ACKs: 40 ms a reply
    server.set_keep_alive_max_count(1000);
    server.set_keep_alive_timeout(1);  // two threads: do not park on idlers
    server.set_read_timeout(5, 0);
    server.set_write_timeout(5, 0);
    int port = where.port;
    if (port == 0) {
      port = server.bind_to_any_port(where.host);
    } else if (!server.bind_to_port(where.host, port)) {
      port = -1;
    }
    if (port <= 0) {
      return absl::UnavailableError(absl::StrCat(
          "stats_addr: cannot listen on ", where.host, ":", where.port,
          " (in use, or not an address of this host)"));
    }
    endpoint->address_ = absl::StrCat(where.host.find(':') != std::string::npos
                                          ? "[" + where.host + "]"
                                          : where.host,
                                      ":", port);
    endpoint->Route();
    return endpoint;
  }

  // Returns once the server loop runs: httplib's stop() is a no-op before
  // that, and a runtime destroyed right after creation would then wait
  // forever for the thread.
  void Start() {
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      loop_exited_ = true;
    });
    while (!server_.is_running() && !loop_exited_) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  ~Endpoint() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  const std::string& address() const { return address_; }

  int Add(absl::string_view name, std::function<StatsSnapshot()> snapshot) {
    absl::MutexLock lock(&mu_);
    std::string unique(name);
    for (int n = 2; NameTaken(unique); ++n) unique = absl::StrCat(name, "#", n);
    sources_.push_back({next_id_, unique, std::move(snapshot)});
    return next_id_++;
  }

  // Returns true when no source is left.
  bool Remove(int id) {
    absl::MutexLock lock(&mu_);
    std::erase_if(sources_, [id](const Source& s) { return s.id == id; });
    return sources_.empty();
  }

 private:
  Endpoint() = default;

  bool NameTaken(absl::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Source& s : sources_) {
      if (s.name == name) return true;
    }
    return false;
  }

  std::vector<NamedStats> Snapshots() {
    absl::MutexLock lock(&mu_);  // a detaching runtime waits for this read
    std::vector<NamedStats> out;
    out.reserve(sources_.size());
    for (const Source& s : sources_) out.push_back({s.name, s.snapshot()});
    return out;
  }

  void Route() {
    server_.Get(
        "/metrics", [this](const httplib::Request&, httplib::Response& res) {
          res.set_content(StatsToPrometheus(Snapshots()), kPrometheusType);
        });
    server_.Get(
        "/stats", [this](const httplib::Request&, httplib::Response& res) {
          nlohmann::json runtimes = nlohmann::json::object();
          for (const NamedStats& r : Snapshots()) {
            runtimes[r.runtime] = nlohmann::json::parse(r.stats.ToJson());
          }
          res.set_content(nlohmann::json{{"runtimes", runtimes}}.dump(2) + "\n",
                          "application/json");
        });
    server_.Get("/healthz",
                [](const httplib::Request&, httplib::Response& res) {
                  res.set_content("ok\n", "text/plain");
                });
  }

  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> loop_exited_{false};
  std::string address_;
  absl::Mutex mu_;
  std::vector<Source> sources_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

class Attachment final : public StatsAttachment {
 public:
  Attachment(Endpoint* endpoint, int id)
      : endpoint_(endpoint), id_(id), address_(endpoint->address()) {}
  ~Attachment() override {
    absl::MutexLock lock(&registry_mu);
    if (endpoint_->Remove(id_)) {
      Registry().erase(address_);
      delete endpoint_;  // stops the server, joins its threads
    }
  }
  const std::string& address() const override { return address_; }

 private:
  Endpoint* endpoint_;
  int id_;
  std::string address_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StatsAttachment>> AttachStatsEndpoint(
    absl::string_view address, absl::string_view name,
    std::function<StatsSnapshot()> snapshot) {
  absl::StatusOr<HostPort> where = ParseAddress(address);
  if (!where.ok()) return where.status();
  absl::MutexLock lock(&registry_mu);
  const std::string key = absl::StrCat(where->host, ":", where->port);
  auto found = Registry().find(key);
  Endpoint* endpoint = found != Registry().end() ? found->second : nullptr;
  if (endpoint == nullptr) {
    absl::StatusOr<std::unique_ptr<Endpoint>> bound = Endpoint::Bind(*where);
    if (!bound.ok()) return bound.status();
    endpoint = bound->release();
    Registry()[endpoint->address()] = endpoint;
    endpoint->Start();
    Logger().info("stats endpoint on http://{}/metrics", endpoint->address());
  }
  const int id = endpoint->Add(name, std::move(snapshot));
  return std::make_unique<Attachment>(endpoint, id);
}

}  // namespace tailor::internal
