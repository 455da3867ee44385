// Test support: Debian's real Prometheus server as a child process scraping given targets on
// loopback, and instant queries against its HTTP API. The process runs under coreutils' timeout so
// even a SIGKILLed test cannot leave it running; the destructor stops it (SIGTERM, SIGKILL after
// 5 s) and removes its temp dir.
#pragma once

#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"

namespace ditserve::testing {

constexpr char kPrometheusBinary[] = "/usr/bin/prometheus";
constexpr char kTimeoutBinary[] = "/usr/bin/timeout";

// True when Prometheus and coreutils' timeout are installed.
bool PrometheusAvailable();

// A free loopback TCP port (comm::PickFreePort on 127.0.0.1); -1 on failure.
int FreeLoopbackPort();

class PrometheusProcess {
 public:
  PrometheusProcess() = default;
  PrometheusProcess(const PrometheusProcess&) = delete;
  PrometheusProcess& operator=(const PrometheusProcess&) = delete;
  ~PrometheusProcess();

  // Writes a config (job "ditserve", 1 s scrape interval, /metrics of every target) and starts
  // Prometheus with its API on 127.0.0.1:<api_port>; it is killed after `max_seconds` regardless.
  bool Start(const std::vector<std::string>& targets, int api_port, int max_seconds = 90);
  // True once the process has exited (on its own: Start succeeded and it died or timed out).
  bool Exited();
  std::string Log() const;

 private:
  Subprocess process_;
  bool exited_ = false;
  std::string dir_;
};

// The result vector of an instant query, or an empty array on any error.
nlohmann::json PrometheusQuery(httplib::Client& client, const std::string& promql);

}  // namespace ditserve::testing
