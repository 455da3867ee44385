#include "tests/support/prometheus_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

extern char** environ;

namespace ditserve::testing {

using Clock = std::chrono::steady_clock;

bool PrometheusAvailable() {
  return access(kPrometheusBinary, X_OK) == 0 && access(kTimeoutBinary, X_OK) == 0;
}

int FreeLoopbackPort() {
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

PrometheusProcess::~PrometheusProcess() {
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
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = posix_spawn(&pid_, kTimeoutBinary, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) pid_ = -1;
  return rc == 0;
}

bool PrometheusProcess::Exited() {
  int status;
  return pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_ && (pid_ = -1, true);
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
