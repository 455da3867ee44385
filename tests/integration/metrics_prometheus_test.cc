// End to end against Debian's real Prometheus server (2.42): it scrapes our MetricsHttpServer on
// loopback every second; we wait until `up` is 1, the histogram has samples, histogram_quantile
// works, and an escaped label value round-trips. Bounded to ~50 s; the Prometheus process and its
// temp dir are cleaned up even when an assertion fails.
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "metrics/builder.h"
#include "metrics/ditserve_metrics.h"
#include "metrics/http_server.h"
#include "metrics/registry.h"

extern char** environ;

namespace ditserve::metrics {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kTimeout[] = "/usr/bin/timeout";
using Clock = std::chrono::steady_clock;

// A free loopback TCP port (bind to 0, read it back, release it).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Owns the Prometheus child process and its temp dir: SIGTERM, then SIGKILL, then rm -r.
class PrometheusProcess {
 public:
  ~PrometheusProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      const auto deadline = Clock::now() + std::chrono::seconds(5);
      int status = 0;
      while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          kill(pid_, SIGKILL);
          waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  // Writes the config and starts Prometheus on 127.0.0.1:<api_port> scraping `target`.
  bool Start(const std::string& target, int api_port) {
    char tmpl[] = "/tmp/metrics_prometheus_test_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return false;
    dir_ = tmpl;
    config_ = dir_ + "/prometheus.yml";
    std::ofstream(config_) << "global:\n"
                              "  scrape_interval: 1s\n"
                              "  scrape_timeout: 1s\n"
                              "  evaluation_interval: 1s\n"
                              "scrape_configs:\n"
                              "  - job_name: ditserve\n"
                              "    metrics_path: /metrics\n"
                              "    static_configs:\n"
                              "      - targets: ['" << target << "']\n";
    const std::string log = dir_ + "/prometheus.log";
    // Under coreutils' timeout, so even a SIGKILLed test (ctest timeout) cannot leave Prometheus
    // running for more than 90 s; timeout forwards our SIGTERM to it.
    std::vector<std::string> args = {kTimeout, "-k", "5", "90", kPrometheus,
                                     "--config.file=" + config_,
                                     "--storage.tsdb.path=" + dir_ + "/data",
                                     "--web.listen-address=127.0.0.1:" + std::to_string(api_port),
                                     "--log.level=warn"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, kTimeout, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }

  bool Exited() {
    int status;
    return pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_ && (pid_ = -1, true);
  }

  std::string Log() const {
    std::ifstream in(dir_ + "/prometheus.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string config_;
};

// The result vector of an instant query, or an empty array.
nlohmann::json Query(httplib::Client& client, const std::string& promql) {
  auto res = client.Get("/api/v1/query?query=" + httplib::detail::encode_query_param(promql));
  if (!res || res->status != 200) return nlohmann::json::array();
  auto body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || body.value("status", "") != "success") return nlohmann::json::array();
  return body["data"]["result"];
}

TEST(MetricsPrometheus, RealPrometheusScrapesAndQueriesOurEndpoint) {
  if (access(kPrometheus, X_OK) != 0 || access(kTimeout, X_OK) != 0) {
    GTEST_SKIP() << "prometheus (or coreutils timeout) not installed";
  }
  Registry registry;
  auto metrics = DitserveMetrics::Create(registry, {"0.1.0", "flux1", 2, "bfloat16"});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  for (double s : {0.4, 0.8, 1.5, 2.5, 4.0, 8.0}) {
    (*metrics)->RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, s);
  }
  const std::string tricky = "a\"b\\c\nd";
  auto info = BuildGauge().Name("demo_escape_info").Help("Escaping \\ check\nsecond line.").Register(registry);
  ASSERT_TRUE(info.ok());
  (*(*info)->Add({{"value", tricky}}))->Set(1);

  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 2}, {&registry});
  ASSERT_TRUE(server.ok()) << server.status();
  const int api_port = FreePort();
  ASSERT_GT(api_port, 0);

  PrometheusProcess prometheus;
  ASSERT_TRUE(prometheus.Start("127.0.0.1:" + std::to_string((*server)->port()), api_port));
  httplib::Client client("127.0.0.1", api_port);
  client.set_connection_timeout(1);
  client.set_read_timeout(5);

  const auto deadline = Clock::now() + std::chrono::seconds(50);
  const auto started = Clock::now();
  bool up = false, histogram = false;
  while (Clock::now() < deadline && !(up && histogram)) {
    ASSERT_FALSE(prometheus.Exited()) << "prometheus exited:\n" << prometheus.Log();
    if (!up) {
      auto r = Query(client, "up{job=\"ditserve\"}");
      up = r.size() == 1 && r[0]["value"][1] == "1";
    }
    if (up && !histogram) {
      auto r = Query(client, "ditserve_request_duration_seconds_count{method=\"Generate\"}");
      histogram = r.size() == 1 && r[0]["value"][1] == "6";
    }
    if (!(up && histogram)) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(up) << "up{job=ditserve} never became 1 within 50 s\n" << prometheus.Log();
  ASSERT_TRUE(histogram) << "histogram samples never arrived\n" << prometheus.Log();
  std::printf("first successful scrape visible after %.1f s\n",
              std::chrono::duration<double>(Clock::now() - started).count());

  // The target is healthy with no scrape error.
  auto targets = client.Get("/api/v1/targets?state=active");
  ASSERT_TRUE(targets);
  auto tj = nlohmann::json::parse(targets->body);
  ASSERT_EQ(tj["data"]["activeTargets"].size(), 1u);
  EXPECT_EQ(tj["data"]["activeTargets"][0]["health"], "up");
  EXPECT_EQ(tj["data"]["activeTargets"][0]["lastError"], "");

  // Buckets are usable: median of {0.4,0.8,1.5,2.5,4,8} falls in (1, 3].
  auto q = Query(client,
                 "histogram_quantile(0.5, sum by (le) "
                 "(ditserve_request_duration_seconds_bucket{method=\"Generate\"}))");
  ASSERT_EQ(q.size(), 1u);
  const double median = std::stod(q[0]["value"][1].get<std::string>());
  EXPECT_GT(median, 1);
  EXPECT_LE(median, 3);

  // Pre-initialised zero series and the escaped label value survive the trip.
  auto zero = Query(client, "ditserve_requests_total{method=\"Generate\",code=\"RESOURCE_EXHAUSTED\"}");
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0]["value"][1], "0");
  auto escaped = Query(client, "demo_escape_info");
  ASSERT_EQ(escaped.size(), 1u);
  EXPECT_EQ(escaped[0]["metric"]["value"], tricky);
  auto worker = Query(client, "ditserve_build_info");
  ASSERT_EQ(worker.size(), 1u);
  EXPECT_EQ(worker[0]["metric"]["tp_degree"], "2");

  // Metadata carries our TYPE and HELP.
  auto meta = client.Get("/api/v1/metadata?metric=ditserve_request_duration_seconds");
  ASSERT_TRUE(meta);
  auto mj = nlohmann::json::parse(meta->body);
  ASSERT_FALSE(mj["data"]["ditserve_request_duration_seconds"].empty()) << meta->body;
  EXPECT_EQ(mj["data"]["ditserve_request_duration_seconds"][0]["type"], "histogram");
}

}  // namespace
}  // namespace ditserve::metrics
