// Child processes: the one fork/exec of the tree (workers, tools, tests). Spawn starts argv with an
// optional environment, working directory and stdout/stderr redirection; the returned Subprocess
// handle waits (with or without a timeout), signals, and on destruction kills (SIGKILL) and reaps a
// child that is still its own, unless Release() gave it up.
//
// Threads: Spawn may be called from any thread, also in a process that runs gRPC or LibTorch
// threads: everything the child needs is prepared before fork, and between fork and exec the
// child makes only async-signal-safe calls. One Subprocess handle is used by one thread at a time.
// Reaping: a handle reaps only its own pid (waitpid(pid)), never "any child".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve {

// Where one of the child's output streams goes (default: the parent's).
struct Redirect {
  enum class Kind { kInherit, kFile, kPipe, kStdout };
  Kind kind = Kind::kInherit;
  std::string path;  // kFile: created or truncated

  static Redirect File(std::string path) { return {Kind::kFile, std::move(path)}; }
  // A pipe whose read end the parent gets from Subprocess::stdout_fd() / stderr_fd().
  static Redirect Pipe() { return {Kind::kPipe, {}}; }
  // stderr only: wherever stdout goes (one log file for both).
  static Redirect ToStdout() { return {Kind::kStdout, {}}; }
};

struct SpawnOptions {
  SpawnOptions() = default;
  explicit SpawnOptions(std::vector<std::string> argv) : argv(std::move(argv)) {}

  // argv[0] is the program: a path, or (without '/') a name looked up on PATH.
  std::vector<std::string> argv;
  // "NAME=value" entries added to the inherited environment, replacing inherited ones of the same
  // name.
  std::vector<std::string> env;
  std::string cwd;  // working directory of the child; empty: the parent's
  Redirect stdout_to;
  Redirect stderr_to;
  std::string stdin_from;  // a file to read stdin from (e.g. "/dev/null"); empty: the parent's
  // The child leads a new process group, and Kill() signals the whole group.
  bool new_process_group = false;
  // The child receives SIGTERM when the thread that spawned it exits, and so when its process
  // dies (PR_SET_PDEATHSIG): no orphan outlives a crashed parent. Spawn from a long-lived thread.
  bool die_with_parent = false;
};

// How a child ended, or that it stopped (see TryWait): waitpid's status word.
struct ExitStatus {
  int raw = 0;

  bool exited() const;
  int exit_code() const;  // exited(): the code; otherwise -1
  bool signaled() const;
  int term_signal() const;  // signaled(): the signal; otherwise 0
  bool stopped() const;
  bool success() const { return exited() && exit_code() == 0; }
  std::string ToString() const;  // "exit code 3", "killed by signal 9", "stopped by signal 19"
};

class Subprocess {
 public:
  // Starts the child. INVALID_ARGUMENT on an empty argv; INTERNAL naming argv[0] when a
  // redirection cannot be opened, the working directory cannot be entered, or the program cannot
  // be executed (the child's exec error is reported here, not as an exit code).
  static absl::StatusOr<Subprocess> Spawn(const SpawnOptions& options);

  Subprocess() = default;  // no child
  // Moving hands the child over; assigning over a handle that still has one kills and reaps it.
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps a child not yet reaped; closes the pipe ends.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Spawned, not yet reaped and not released.
  bool running() const { return pid_ > 0; }
  // The read ends of Redirect::Pipe() streams (owned by the handle), or -1.
  int stdout_fd() const { return stdout_fd_; }
  int stderr_fd() const { return stderr_fd_; }

  // Non-blocking: the child's status once it has exited (it is then reaped), or with
  // `report_stopped` once it is stopped (it is not reaped then); nullopt while it runs.
  std::optional<ExitStatus> TryWait(bool report_stopped = false);
  // Blocks until the child exits and reaps it. (Without a child: a zero status at once.)
  ExitStatus Wait();
  // Like Wait() for at most `timeout`; nullopt when it elapses (the child keeps running) or there
  // is no child.
  std::optional<ExitStatus> WaitFor(std::chrono::milliseconds timeout);
  // Sends `signal` to the child (its group with new_process_group). No-op once reaped.
  void Kill(int signal);
  // SIGTERM, up to `grace` for it to exit, then SIGKILL; returns how it ended.
  ExitStatus Terminate(std::chrono::milliseconds grace);
  // Gives the child up: this handle will neither kill nor reap it. Returns its pid.
  pid_t Release();

 private:
  void CloseFds();

  pid_t pid_ = -1;
  bool group_ = false;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
};

}  // namespace ditserve
