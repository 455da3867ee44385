// Test support: a real ditserve-frontend process (with its spawned workers) on loopback ports
// chosen by the OS. Start() waits for the "LISTENING <port>" / "METRICS <port>" lines the
// frontend prints; the destructor sends SIGTERM and reaps it (SIGKILL after a grace period).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "common/subprocess.h"

namespace ditserve::testing {

class ServerProcess {
 public:
  // `args` are ditserve-frontend flags; --listen and --metrics-listen are added (port 0).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& args);
  ~ServerProcess();

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int metrics_port() const { return metrics_port_; }
  const std::string& log_path() const { return log_path_; }  // the frontend's stderr
  std::shared_ptr<grpc::Channel> Channel() const;

  // Health of the overall server ("" service): "SERVING", "NOT_SERVING", or an error string.
  std::string Health() const;
  // Polls Health() until SERVING or the timeout.
  bool WaitUntilServing(std::chrono::seconds timeout) const;
  pid_t pid() const { return process_.pid(); }
  // The live worker processes the frontend spawned, by rank (from /proc: children of the frontend
  // whose command line has "--rank N"; zombies left out).
  std::map<int, pid_t> WorkerPids() const;
  // Sends `signal` to the frontend itself.
  void Signal(int signal) { process_.Kill(signal); }
  // Waits for the frontend's exit (after a signal); its exit status, or nullopt after `timeout`.
  std::optional<ExitStatus> WaitForExit(std::chrono::milliseconds timeout) { return process_.WaitFor(timeout); }
  // SIGTERM, then waits for exit; returns the exit status (or -1 when it had to be killed).
  int Stop(std::chrono::seconds grace = std::chrono::seconds(40));

 private:
  ServerProcess() = default;
  Subprocess process_;  // stdout piped (the port lines), stderr to log_path_
  int port_ = 0;
  int metrics_port_ = 0;
  std::string log_path_;
};

// Frontends shared by a test binary's tests, one per distinct flag list: register one with
// ::testing::AddGlobalTestEnvironment. Get starts a frontend on first use of its flags and waits
// until it is SERVING (a test failure naming its log otherwise; null when it could not start);
// TearDown stops them all and expects each to exit 0.
class ServerPool : public ::testing::Environment {
 public:
  ServerProcess* Get(const std::vector<std::string>& args,
                     std::chrono::seconds serving_timeout = std::chrono::seconds(180));
  void TearDown() override;

 private:
  std::map<std::string, std::unique_ptr<ServerProcess>> servers_;  // by the flags, joined
};

}  // namespace ditserve::testing
