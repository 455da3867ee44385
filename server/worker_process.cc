#include "server/worker_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace ditserve::server {

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const WorkerProcessOptions& opts, std::function<void()> on_exit) {
  if (::access(opts.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker binary '", opts.binary, "' is not executable: ", std::strerror(errno)));
  }
  std::unique_ptr<WorkerProcess> proc(new WorkerProcess());
  char tmpl[] = "/tmp/ditserve-worker-port-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return absl::InternalError(absl::StrCat("mkstemp: ", std::strerror(errno)));
  ::close(fd);
  proc->port_file_ = tmpl;
  std::ofstream(proc->port_file_, std::ios::trunc).close();

  SpawnOptions spawn({opts.binary, "--listen", absl::StrCat(opts.host, ":0"), "--port-file",
                      proc->port_file_, "--rank", std::to_string(opts.rank)});
  spawn.argv.insert(spawn.argv.end(), opts.extra_args.begin(), opts.extra_args.end());
  spawn.die_with_parent = true;  // no orphaned worker keeps a GPU
  ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(spawn));
  // The reaper thread below owns the pid from here (it waits without reaping first, see Reap).
  proc->pid_ = child.Release();
  proc->on_exit_ = std::move(on_exit);
  proc->reaper_ = std::thread([p = proc.get()] { p->Reap(); });

  // The worker renames its port file into place once it listens; nothing signals that, so look
  // every 20 ms (start-up only). A death ends the wait at once.
  const auto deadline = std::chrono::steady_clock::now() + opts.start_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(proc->port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      proc->address_ = absl::StrCat(opts.host, ":", port);
      return proc;
    }
    if (proc->WaitForExit(std::min(deadline, std::chrono::steady_clock::now() +
                                                 std::chrono::milliseconds(20)))) {
      return absl::UnavailableError(
          absl::StrCat("worker rank ", opts.rank, " (", opts.binary, ") exited during start-up"));
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("worker rank ", opts.rank, " did not start listening within ",
                   opts.start_timeout.count(), " ms"));
}

void WorkerProcess::Reap() {
  // Wait without reaping first, so the pid cannot be reused while Stop() may still signal it.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_ = true;
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  cv_.notify_all();
  if (on_exit_) on_exit_();
}

bool WorkerProcess::Alive() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_ > 0 && !exited_;
}

bool WorkerProcess::WaitForExit(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, until, [&] { return exited_; });
}

void WorkerProcess::Stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ <= 0 || exited_) return;
    ::kill(pid_, SIGTERM);
  }
  if (WaitForExit(std::chrono::steady_clock::now() + grace)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!exited_) ::kill(pid_, SIGKILL);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return exited_; });
}

WorkerProcess::~WorkerProcess() {
  Stop();
  if (reaper_.joinable()) reaper_.join();
  if (!port_file_.empty()) ::unlink(port_file_.c_str());
}

}  // namespace ditserve::server
