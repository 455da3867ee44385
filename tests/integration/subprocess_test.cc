// common/subprocess.h with real children (/bin/sh): exit codes, redirections, environment, working
// directory, exec errors, timeouts, signals, process groups, and the RAII handle's kill-and-reap.
#include "common/subprocess.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace ditserve {
namespace {

using std::chrono::milliseconds;

SpawnOptions Shell(const std::string& script) { return SpawnOptions({"sh", "-c", script}); }

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Gone, or a zombie waiting for whoever inherited it: either way no longer running.
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z';
}

bool EventuallyGone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

class SubprocessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "subprocess_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  std::string dir_;
};

TEST_F(SubprocessTest, ReportsTheExitCodeFoundOnPath) {
  auto child = Subprocess::Spawn(Shell("exit 3"));
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE(child->running());
  const ExitStatus st = child->Wait();
  EXPECT_TRUE(st.exited());
  EXPECT_EQ(st.exit_code(), 3);
  EXPECT_FALSE(st.success());
  EXPECT_EQ(st.ToString(), "exit code 3");
  EXPECT_FALSE(child->running());
}

TEST_F(SubprocessTest, RedirectsBothStreamsIntoOneFile) {
  SpawnOptions o = Shell("echo out; echo err >&2; echo out2");
  o.stdout_to = Redirect::File(dir_ + "/log");
  o.stderr_to = Redirect::ToStdout();
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE(child->Wait().success());
  EXPECT_EQ(ReadFile(dir_ + "/log"), "out\nerr\nout2\n");
}

TEST_F(SubprocessTest, PipesStdoutAndStderrSeparately) {
  SpawnOptions o = Shell("printf hello; printf oops >&2");
  o.stdout_to = Redirect::Pipe();
  o.stderr_to = Redirect::Pipe();
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_GE(child->stdout_fd(), 0);
  ASSERT_GE(child->stderr_fd(), 0);
  EXPECT_EQ(ReadAll(child->stdout_fd()), "hello");  // EOF: the child holds no other copy
  EXPECT_EQ(ReadAll(child->stderr_fd()), "oops");
  EXPECT_TRUE(child->Wait().success());
}

TEST_F(SubprocessTest, EnvironmentEntriesReplaceInheritedOnesAndWorkingDirectoryApplies) {
  ASSERT_EQ(::setenv("DITSERVE_SUBPROCESS_TEST", "inherited", 1), 0);
  ASSERT_EQ(::setenv("DITSERVE_SUBPROCESS_KEPT", "kept", 1), 0);
  SpawnOptions o = Shell("env | grep -c '^DITSERVE_SUBPROCESS_TEST='; "
                         "echo $DITSERVE_SUBPROCESS_TEST $DITSERVE_SUBPROCESS_KEPT; pwd");
  o.env = {"DITSERVE_SUBPROCESS_TEST=ours"};
  o.cwd = dir_;
  o.stdout_to = Redirect::Pipe();
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  const std::string out = ReadAll(child->stdout_fd());
  EXPECT_TRUE(child->Wait().success());
  char real[PATH_MAX];
  ASSERT_NE(::realpath(dir_.c_str(), real), nullptr);
  EXPECT_EQ(out, "1\nours kept\n" + std::string(real) + "\n");
  ::unsetenv("DITSERVE_SUBPROCESS_TEST");
  ::unsetenv("DITSERVE_SUBPROCESS_KEPT");
}

TEST_F(SubprocessTest, StdinComesFromAFile) {
  std::ofstream(dir_ + "/in") << "line one\nline two\n";
  SpawnOptions o({"cat"});
  o.stdin_from = dir_ + "/in";
  o.stdout_to = Redirect::Pipe();
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ReadAll(child->stdout_fd()), "line one\nline two\n");
  auto st = child->WaitFor(milliseconds(10000));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->success());

  o.stdin_from = "/dev/null";  // a reader sees end-of-file at once
  auto empty = Subprocess::Spawn(o);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(ReadAll(empty->stdout_fd()), "");
  EXPECT_TRUE(empty->Wait().success());
}

TEST_F(SubprocessTest, StartFailuresAreErrorsNamingTheProgram) {
  auto missing = Subprocess::Spawn(SpawnOptions({dir_ + "/no-such-program"}));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), dir_ + "/no-such-program"))
      << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "No such file")) << missing.status();

  SpawnOptions bad_cwd = Shell("true");
  bad_cwd.cwd = dir_ + "/absent";
  auto in_missing_dir = Subprocess::Spawn(bad_cwd);
  ASSERT_FALSE(in_missing_dir.ok());
  EXPECT_TRUE(absl::StrContains(in_missing_dir.status().message(), dir_ + "/absent"))
      << in_missing_dir.status();

  SpawnOptions bad_log = Shell("true");
  bad_log.stdout_to = Redirect::File(dir_ + "/absent/log");
  EXPECT_FALSE(Subprocess::Spawn(bad_log).ok());
  EXPECT_EQ(Subprocess::Spawn(SpawnOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SubprocessTest, WaitForTimesOutAndTerminateEndsTheChild) {
  auto child = Subprocess::Spawn(Shell("exec sleep 30"));
  ASSERT_TRUE(child.ok()) << child.status();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(child->WaitFor(milliseconds(100)).has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));
  EXPECT_TRUE(child->running());
  EXPECT_FALSE(child->TryWait().has_value());
  const ExitStatus st = child->Terminate(milliseconds(5000));
  EXPECT_TRUE(st.signaled());
  EXPECT_EQ(st.term_signal(), SIGTERM);
  EXPECT_FALSE(child->running());
}

TEST_F(SubprocessTest, TerminateEscalatesToSigkill) {
  SpawnOptions o = Shell("trap '' TERM; echo ready; while :; do sleep 1; done");
  o.stdout_to = Redirect::Pipe();
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  char c;
  ASSERT_EQ(::read(child->stdout_fd(), &c, 1), 1);  // the trap is set
  const ExitStatus st = child->Terminate(milliseconds(200));
  EXPECT_EQ(st.term_signal(), SIGKILL) << st.ToString();
}

TEST_F(SubprocessTest, DestructionKillsAndReapsUnlessReleased) {
  pid_t owned = -1;
  {
    auto child = Subprocess::Spawn(Shell("exec sleep 30"));
    ASSERT_TRUE(child.ok()) << child.status();
    owned = child->pid();
  }
  // Reaped, not a zombie: the pid no longer exists at all.
  EXPECT_EQ(::kill(owned, 0), -1);
  EXPECT_EQ(errno, ESRCH);

  pid_t released = -1;
  {
    auto child = Subprocess::Spawn(Shell("exec sleep 30"));
    ASSERT_TRUE(child.ok()) << child.status();
    released = child->Release();
    EXPECT_FALSE(child->running());
  }
  EXPECT_EQ(::kill(released, 0), 0) << "a released child must outlive the handle";
  ::kill(released, SIGKILL);
  int status = 0;
  EXPECT_EQ(::waitpid(released, &status, 0), released);
  EXPECT_TRUE(WIFSIGNALED(status));

  // Moving hands the child over; the moved-from handle owns nothing.
  auto a = Subprocess::Spawn(Shell("exit 5"));
  ASSERT_TRUE(a.ok());
  Subprocess b = std::move(*a);
  EXPECT_FALSE(a->running());
  EXPECT_EQ(b.Wait().exit_code(), 5);
}

TEST_F(SubprocessTest, NewProcessGroupIsKilledWhole) {
  SpawnOptions o = Shell("sleep 30 & echo $!; wait");
  o.stdout_to = Redirect::Pipe();
  o.new_process_group = true;
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(::getpgid(child->pid()), child->pid());
  std::string line;
  char c;
  while (::read(child->stdout_fd(), &c, 1) == 1 && c != '\n') line.push_back(c);
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line, &grandchild)) << line;
  child->Kill(SIGKILL);
  EXPECT_EQ(child->Wait().term_signal(), SIGKILL);
  EXPECT_TRUE(EventuallyGone(grandchild)) << "the group's other member survived";
}

TEST_F(SubprocessTest, StoppedChildIsReportedOnRequestAndStillReaped) {
  auto child = Subprocess::Spawn(Shell("kill -STOP $$; exit 0"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::optional<ExitStatus> st;
  for (int i = 0; i < 500 && !st; ++i) {
    st = child->TryWait(/*report_stopped=*/true);
    if (!st) std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->stopped());
  EXPECT_EQ(st->ToString(), "stopped by signal " + std::to_string(SIGSTOP));
  EXPECT_TRUE(child->running()) << "a stopped child is not reaped";
  const pid_t pid = child->pid();
  *child = Subprocess();  // the handle kills and reaps the stopped child
  EXPECT_EQ(::kill(pid, 0), -1);
}

}  // namespace
}  // namespace ditserve
