// WorkerProcess: one spawned ditserve-worker child (the --spawn-workers mode). RAII: the
// destructor terminates the child (SIGTERM, then SIGKILL after a grace period) and reaps it.
// The child binds port 0 and writes the chosen port to a file, which Start() waits for, so no
// port is ever guessed. Not thread-safe: owned and driven by the WorkerGroup's control thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::server {

struct WorkerProcessOptions {
  std::string binary;
  std::string host = "127.0.0.1";
  int rank = 0;
  std::vector<std::string> extra_args;  // e.g. --device-index, --log-level
  std::chrono::milliseconds start_timeout{60000};
};

class WorkerProcess {
 public:
  // Starts the child and waits until it listens. Returns its address (host:port).
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(const WorkerProcessOptions& opts);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // False once the child has exited (reaps it).
  bool Alive();
  // Sends SIGTERM and waits up to `grace`, then SIGKILL.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

 private:
  WorkerProcess() = default;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string address_;
  std::string port_file_;
};

}  // namespace ditserve::server
