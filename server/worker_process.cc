#include "server/worker_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace ditserve::server {

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const WorkerProcessOptions& opts) {
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

  std::vector<std::string> args = {opts.binary,
                                   "--listen", absl::StrCat(opts.host, ":0"),
                                   "--port-file", proc->port_file_,
                                   "--rank", std::to_string(opts.rank)};
  args.insert(args.end(), opts.extra_args.begin(), opts.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: die with the frontend, so no orphaned worker keeps a GPU.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  proc->pid_ = pid;

  const auto deadline = std::chrono::steady_clock::now() + opts.start_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!proc->Alive()) {
      return absl::UnavailableError(
          absl::StrCat("worker rank ", opts.rank, " (", opts.binary, ") exited during start-up"));
    }
    std::ifstream in(proc->port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      proc->address_ = absl::StrCat(opts.host, ":", port);
      return proc;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("worker rank ", opts.rank, " did not start listening within ",
                   opts.start_timeout.count(), " ms"));
}

bool WorkerProcess::Alive() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    reaped_ = true;
    return false;
  }
  return true;
}

void WorkerProcess::Stop(std::chrono::milliseconds grace) {
  if (!Alive()) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Alive()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  reaped_ = true;
}

WorkerProcess::~WorkerProcess() {
  Stop();
  if (!port_file_.empty()) ::unlink(port_file_.c_str());
}

}  // namespace ditserve::server
