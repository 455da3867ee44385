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
#include "common/status_macros.h"

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

// A pipe, both ends close-on-exec.
absl::Status OpenPipe(const std::string& program, Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("spawning ", program, ": pipe: ", std::strerror(errno)));
  }
  read_end.fd = fds[0];
  write_end.fd = fds[1];
  return absl::OkStatus();
}

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
    case Redirect::Kind::kPipe:
      return OpenPipe(program, parent_end, child_end);
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

// execvpe's argv: pointers into `args`, then nullptr.
std::vector<char*> ExecArgv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// execvpe's envp: the inherited environment less the names `env` sets, then `env`, then nullptr.
std::vector<char*> ExecEnvp(const std::vector<std::string>& env) {
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    bool replaced = false;
    for (const std::string& x : env) {
      const size_t eq = x.find('=');
      replaced |= eq != std::string::npos && std::strncmp(*e, x.c_str(), eq + 1) == 0;
    }
    if (!replaced) envp.push_back(*e);
  }
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  return envp;
}

// The descriptors of one spawn, all opened before fork: what the child dup2()s onto its streams,
// the read ends of the parent's pipes, and the status pipe that carries a failed child's report.
struct SpawnFds {
  Fd out_child, out_parent, err_child, err_parent, in_child, status_read, status_write;
};

// Opens the redirections of stdout, stderr and stdin, then the status pipe.
absl::Status OpenSpawnFds(const SpawnOptions& options, SpawnFds& fds) {
  const std::string& program = options.argv[0];
  RETURN_IF_ERROR(OpenRedirect(options.stdout_to, program, fds.out_child, fds.out_parent));
  RETURN_IF_ERROR(OpenRedirect(options.stderr_to, program, fds.err_child, fds.err_parent));
  if (!options.stdin_from.empty()) {
    fds.in_child.fd = ::open(options.stdin_from.c_str(), O_RDONLY | O_CLOEXEC);
    if (fds.in_child.fd < 0) {
      return absl::InternalError(absl::StrCat("spawning ", program, ": cannot read ",
                                              options.stdin_from, ": ", std::strerror(errno)));
    }
  }
  return OpenPipe(program, fds.status_read, fds.status_write);
}

// Reads the status pipe until it closes at a successful exec (returns 0, nothing read) or carries
// a failed child's {step, errno} (returns > 0); read()'s result.
ssize_t ReadChildReport(int status_fd, int (&report)[2]) {
  ssize_t n;
  while ((n = ::read(status_fd, report, sizeof(report))) < 0 && errno == EINTR) {
  }
  return n;
}

// The INTERNAL status of a child that reported `report` ({step, errno}).
absl::Status ChildFailure(const SpawnOptions& options, const int (&report)[2]) {
  const char* what = report[0] == kStepChdir    ? "cannot enter its working directory"
                     : report[0] == kStepParent ? "the parent exited"
                     : report[0] == kStepDup    ? "cannot redirect its output"
                                                : "cannot execute it";
  return absl::InternalError(absl::StrCat(
      "spawning ", options.argv[0], ": ", what,
      !options.cwd.empty() && report[0] == kStepChdir ? absl::StrCat(" ", options.cwd) : "", ": ",
      std::strerror(report[1])));
}

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
  std::vector<char*> argv = ExecArgv(options.argv);
  std::vector<char*> envp = ExecEnvp(options.env);
  SpawnFds fds;
  RETURN_IF_ERROR(OpenSpawnFds(options, fds));
  const bool err_to_out = options.stderr_to.kind == Redirect::Kind::kStdout;
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("spawning ", program, ": fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // The child, between fork and exec: async-signal-safe calls only (no allocation, no locks) on
    // what was built above. It stays here in one piece so no work moves across the fork.
    const int sw = fds.status_write.fd;
    if (options.new_process_group) ::setpgid(0, 0);
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ChildFail(sw, kStepParent);  // the parent is already gone
    }
    // dup2 clears O_CLOEXEC on the new descriptor; the originals close at exec.
    if ((fds.in_child.fd >= 0 && ::dup2(fds.in_child.fd, STDIN_FILENO) < 0) ||
        (fds.out_child.fd >= 0 && ::dup2(fds.out_child.fd, STDOUT_FILENO) < 0) ||
        (fds.err_child.fd >= 0 && ::dup2(fds.err_child.fd, STDERR_FILENO) < 0) ||
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
  fds.status_write.Close();
  fds.out_child.Close();
  fds.err_child.Close();
  int report[2] = {0, 0};
  if (ReadChildReport(fds.status_read.fd, report) > 0) {
    child.Wait();  // reap the child that _exit()ed
    return ChildFailure(options, report);
  }
  child.stdout_fd_ = fds.out_parent.Release();
  child.stderr_fd_ = fds.err_parent.Release();
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
