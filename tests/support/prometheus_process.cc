#include "common/remove_tree.h"
#include "tests/support/prometheus_process.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "comm/free_port.h"

namespace ditserve::testing {

bool PrometheusAvailable() {
  return access(kPrometheusBinary, X_OK) == 0 && access(kTimeoutBinary, X_OK) == 0;
}

int FreeLoopbackPort() {
  absl::StatusOr<int> port = comm::PickFreePort("127.0.0.1");
  return port.ok() ? *port : -1;
}

PrometheusProcess::~PrometheusProcess() {
  process_.Terminate(std::chrono::seconds(5));
  if (!dir_.empty()) {
    (void)ditserve::RemoveTree(dir_);
  }
}

bool PrometheusProcess::Start(const std::vector<std::string>& targets, int api_port, int max_seconds) {
  char tmpl[] = "/tmp/ditserve_prometheus_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return false;
  dir_ = tmpl;
  const std::string config = dir_ + "/prometheus.yml";
  {
    std::ofstream out(config);
    out << "global:\n"
           "  scrape_interval: 1s\n"
           "  scrape_timeout: 1s\n"
           "  evaluation_interval: 1s\n"
           "scrape_configs:\n"
           "  - job_name: ditserve\n"
           "    metrics_path: /metrics\n"
           "    static_configs:\n"
           "      - targets: [";
    for (size_t i = 0; i < targets.size(); ++i) out << (i ? ", '" : "'") << targets[i] << "'";
    out << "]\n";
  }
  const std::string log = dir_ + "/prometheus.log";
  // Under coreutils' timeout, which forwards our SIGTERM to it.
  std::vector<std::string> args = {kTimeoutBinary, "-k", "5", std::to_string(max_seconds),
                                   kPrometheusBinary, "--config.file=" + config,
                                   "--storage.tsdb.path=" + dir_ + "/data",
                                   "--web.listen-address=127.0.0.1:" + std::to_string(api_port),
                                   "--log.level=warn"};
  SpawnOptions o(std::move(args));
  o.stdout_to = Redirect::File(log);
  o.stderr_to = Redirect::ToStdout();
  absl::StatusOr<Subprocess> process = Subprocess::Spawn(o);
  if (!process.ok()) return false;
  process_ = std::move(*process);
  return true;
}

bool PrometheusProcess::Exited() {
  if (process_.TryWait()) exited_ = true;
  return exited_;
}

std::string PrometheusProcess::Log() const {
  std::ifstream in(dir_ + "/prometheus.log");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json PrometheusQuery(httplib::Client& client, const std::string& promql) {
  auto res = client.Get("/api/v1/query?query=" + httplib::detail::encode_query_param(promql));
  if (!res || res->status != 200) return nlohmann::json::array();
  auto body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || body.value("status", "") != "success") return nlohmann::json::array();
  return body["data"]["result"];
}

}  // namespace ditserve::testing
