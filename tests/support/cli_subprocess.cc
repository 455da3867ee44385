#include "tests/support/cli_subprocess.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "common/subprocess.h"

namespace ditserve::testing {

ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env, int timeout_seconds) {
  ProcessResult result;
  SpawnOptions o(argv);
  o.env = extra_env;
  o.stdin_from = "/dev/null";
  o.stdout_to = Redirect::Pipe();
  o.stderr_to = Redirect::Pipe();
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(o);
  if (!child.ok()) {
    result.err = child.status().ToString();
    return result;
  }

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  pollfd fds[2] = {{child->stdout_fd(), POLLIN, 0}, {child->stderr_fd(), POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[65536];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // at end of file; the handle closes it
        --open_fds;
      }
    }
  }
  if (open_fds > 0) child->Kill(SIGKILL);  // timed out, or poll failed: it may block on a full pipe
  const ExitStatus status = child->Wait();
  if (!result.timed_out) result.exit_code = status.exit_code();
  return result;
}

ProcessResult RunSystemProgram(const std::vector<std::string>& argv, int timeout_seconds) {
  return RunProcess(argv, {"LD_LIBRARY_PATH="}, timeout_seconds);
}

bool ProgramExists(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string p = path;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string candidate = p.substr(start, end - start) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace ditserve::testing
