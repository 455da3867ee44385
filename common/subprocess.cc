#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ditserve {
namespace {

// One file descriptor, closed on scope exit unless released.
struct Fd {
  int fd = -1;
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int Release() { return std::exchange(fd, -1); }
};

// Opens what one redirected stream needs: `child_end` is what the child dup2()s onto the stream
// (none for kInherit / kStdout), `parent_end` the read end of a pipe.
absl::Status OpenRedirect(const Redirect& r, const std::string& program, Fd& child_end,
                          Fd& parent_end) {
  switch (r.kind) {
    case Redirect::Kind::kInherit:
    case Redirect::Kind::kStdout:
      return absl::OkStatus();
    case Redirect::Kind::kFile:
      child_end.fd = ::open(r.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (child_end.fd < 0) {
        return absl::InternalError(absl::StrCat("spawning ", program, ": cannot create ", r.path,
                                                ": ", std::strerror(errno)));
      }
      return absl::OkStatus();
    case Redirect::Kind::kPipe: {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        return absl::InternalError(
            absl::StrCat("spawning ", program, ": pipe: ", std::strerror(errno)));
      }
      parent_end.fd = fds[0];
      child_end.fd = fds[1];
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// Writes errno and the failed step to the status pipe and exits (child side, async-signal-safe).
[[noreturn]] void ChildFail(int status_fd, int step) {
  const int report[2] = {step, errno};
  (void)!::write(status_fd, report, sizeof(report));
  ::_exit(127);
}

enum ChildStep { kStepDup = 1, kStepChdir, kStepParent, kStepExec };

}  // namespace

bool ExitStatus::exited() const { return WIFEXITED(raw); }
int ExitStatus::exit_code() const { return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1; }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw); }
int ExitStatus::term_signal() const { return WIFSIGNALED(raw) ? WTERMSIG(raw) : 0; }
bool ExitStatus::stopped() const { return WIFSTOPPED(raw); }

std::string ExitStatus::ToString() const {
  if (exited()) return absl::StrCat("exit code ", exit_code());
  if (signaled()) return absl::StrCat("killed by signal ", term_signal());
  if (stopped()) return absl::StrCat("stopped by signal ", WSTOPSIG(raw));
  return absl::StrCat("wait status ", raw);
}

absl::StatusOr<Subprocess> Subprocess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");
  const std::string& program = options.argv[0];

  // Everything the child touches is built here, before fork.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    bool replaced = false;
    for (const std::string& x : options.env) {
      const size_t eq = x.find('=');
      replaced |= eq != std::string::npos && std::strncmp(*e, x.c_str(), eq + 1) == 0;
    }
    if (!replaced) envp.push_back(*e);
  }
  for (const std::string& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  Fd out_child, out_parent, err_child, err_parent, in_child, status_read, status_write;
  absl::Status s = OpenRedirect(options.stdout_to, program, out_child, out_parent);
  if (s.ok()) s = OpenRedirect(options.stderr_to, program, err_child, err_parent);
  if (!s.ok()) return s;
  const bool err_to_out = options.stderr_to.kind == Redirect::Kind::kStdout;
  if (!options.stdin_from.empty()) {
    in_child.fd = ::open(options.stdin_from.c_str(), O_RDONLY | O_CLOEXEC);
    if (in_child.fd < 0) {
      return absl::InternalError(absl::StrCat("spawning ", program, ": cannot read ",
                                              options.stdin_from, ": ", std::strerror(errno)));
    }
  }
  {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("spawning ", program, ": pipe: ", std::strerror(errno)));
    }
    status_read.fd = fds[0];
    status_write.fd = fds[1];
  }
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("spawning ", program, ": fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    const int sw = status_write.fd;
    if (options.new_process_group) ::setpgid(0, 0);
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ChildFail(sw, kStepParent);  // the parent is already gone
    }
    // dup2 clears O_CLOEXEC on the new descriptor; the originals close at exec.
    if ((in_child.fd >= 0 && ::dup2(in_child.fd, STDIN_FILENO) < 0) ||
        (out_child.fd >= 0 && ::dup2(out_child.fd, STDOUT_FILENO) < 0) ||
        (err_child.fd >= 0 && ::dup2(err_child.fd, STDERR_FILENO) < 0) ||
        (err_to_out && ::dup2(STDOUT_FILENO, STDERR_FILENO) < 0)) {
      ChildFail(sw, kStepDup);
    }
    if (cwd != nullptr && ::chdir(cwd) != 0) ChildFail(sw, kStepChdir);
    ::execvpe(argv[0], argv.data(), envp.data());
    ChildFail(sw, kStepExec);
  }

  Subprocess child;
  child.pid_ = pid;
  child.group_ = options.new_process_group;
  if (child.group_) ::setpgid(pid, pid);  // also here, so Kill() cannot race the child's own call
  status_write.Close();
  out_child.Close();
  err_child.Close();
  // The status pipe closes at a successful exec (EOF, nothing read) or carries the failed step.
  int report[2] = {0, 0};
  ssize_t n;
  while ((n = ::read(status_read.fd, report, sizeof(report))) < 0 && errno == EINTR) {
  }
  if (n > 0) {
    child.Wait();  // reap the child that _exit()ed
    const char* what = report[0] == kStepChdir    ? "cannot enter its working directory"
                       : report[0] == kStepParent ? "the parent exited"
                       : report[0] == kStepDup    ? "cannot redirect its output"
                                                  : "cannot execute it";
    return absl::InternalError(absl::StrCat("spawning ", program, ": ", what,
                                            cwd != nullptr && report[0] == kStepChdir
                                                ? absl::StrCat(" ", options.cwd)
                                                : "",
                                            ": ", std::strerror(report[1])));
  }
  child.stdout_fd_ = out_parent.Release();
  child.stderr_fd_ = err_parent.Release();
  return child;
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      group_(other.group_),
      stdout_fd_(std::exchange(other.stdout_fd_, -1)),
      stderr_fd_(std::exchange(other.stderr_fd_, -1)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (running()) {
      Kill(SIGKILL);
      Wait();
    }
    CloseFds();
    pid_ = std::exchange(other.pid_, -1);
    group_ = other.group_;
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    stderr_fd_ = std::exchange(other.stderr_fd_, -1);
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) {
    Kill(SIGKILL);
    Wait();
  }
  CloseFds();
}

void Subprocess::CloseFds() {
  for (int* fd : {&stdout_fd_, &stderr_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

std::optional<ExitStatus> Subprocess::TryWait(bool report_stopped) {
  if (!running()) return std::nullopt;
  ExitStatus st;
  pid_t got;
  while ((got = ::waitpid(pid_, &st.raw, WNOHANG | (report_stopped ? WUNTRACED : 0))) < 0 &&
         errno == EINTR) {
  }
  if (got != pid_) return std::nullopt;
  if (!st.stopped()) pid_ = -1;
  return st;
}

ExitStatus Subprocess::Wait() {
  ExitStatus st;
  if (!running()) return st;
  while (::waitpid(pid_, &st.raw, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return st;
}

std::optional<ExitStatus> Subprocess::WaitFor(std::chrono::milliseconds timeout) {
  // waitpid has no timeout: poll, starting fine-grained so short-lived children return quickly.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds nap(1);
  while (true) {
    if (auto st = TryWait()) return st;
    if (!running()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(nap, deadline - now));
    nap = std::min(nap * 2, std::chrono::milliseconds(50));
  }
}

void Subprocess::Kill(int signal) {
  if (!running()) return;
  ::kill(group_ ? -pid_ : pid_, signal);
}

ExitStatus Subprocess::Terminate(std::chrono::milliseconds grace) {
  Kill(SIGTERM);
  if (auto st = WaitFor(grace)) return *st;
  Kill(SIGKILL);
  return Wait();
}

pid_t Subprocess::Release() { return std::exchange(pid_, -1); }

}  // namespace ditserve
