// WorkerProcess: one spawned ditserve-worker child (the --spawn-workers mode). RAII: the
// destructor terminates the child (SIGTERM, then SIGKILL after a grace period) and reaps it.
// The child binds port 0 and writes the chosen port to a file, which Start() waits for, so no
// port is ever guessed. A reaper thread waits for the child's exit, so the owner learns of a
// death through `on_exit` (called once, on the reaper thread) instead of polling.
// Not thread-safe apart from Alive() and the callback: owned and driven by the WorkerGroup's
// control thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  // Starts the child and waits until it listens. Returns its address (host:port). `on_exit` is
  // called once when the child exits, however it ends (also after Stop()); it must not call back
  // into this object except Alive()/pid().
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      const WorkerProcessOptions& opts, std::function<void()> on_exit = {});
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // False once the child has exited. Thread-safe.
  bool Alive() const;
  // Sends SIGTERM and waits up to `grace`, then SIGKILL.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

 private:
  WorkerProcess() = default;
  void Reap();  // the reaper thread
  // Waits until the child has exited or `until`; returns whether it has.
  bool WaitForExit(std::chrono::steady_clock::time_point until);

  pid_t pid_ = -1;
  std::function<void()> on_exit_;
  std::thread reaper_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool exited_ = false;  // under mu_; the pid stays reserved (zombie) until the reaper reaps it
  std::string address_;
  std::string port_file_;
};

}  // namespace ditserve::server
