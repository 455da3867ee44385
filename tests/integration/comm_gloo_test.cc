// The Gloo communicator across real processes on loopback: comm_probe launched as N ranks.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "comm/free_port.h"
#include "common/subprocess.h"

namespace ditserve::comm {
namespace {

struct Rank {
  Subprocess process;
  ExitStatus status;  // once done: how it exited, or that it stopped
  bool done = false;
  std::string log;    // stdout + stderr file
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class CommGlooTest : public ::testing::Test {
 protected:
  // Starts ranks `which` of a world of `world` ranks; each writes its output to a log file.
  void Launch(int world, const std::vector<int>& which, const std::string& mode, int timeout_ms,
              int victim = -1) {
    auto port = PickFreePort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status();
    const std::string group = absl::StrCat("test-", getpid(), "-", ++launches_);
    ranks_.clear();
    ranks_.resize(world);
    for (int r : which) {
      Rank& rk = ranks_[r];
      rk.log = absl::StrCat(::testing::TempDir(), "comm_probe_", group, "_", r, ".log");
      std::vector<std::string> args = {
          COMM_PROBE_PATH, "--rank", std::to_string(r), "--world", std::to_string(world),
          "--port", std::to_string(*port), "--group", group,
          "--timeout-ms", std::to_string(timeout_ms), "--mode", mode,
          "--victim", std::to_string(victim)};
      SpawnOptions o(std::move(args));
      o.stdout_to = Redirect::File(rk.log);
      o.stderr_to = Redirect::ToStdout();
      auto process = Subprocess::Spawn(o);
      ASSERT_TRUE(process.ok()) << process.status();
      rk.process = std::move(*process);
    }
  }

  // Waits for every launched rank to exit (a stopped one counts as done: it cannot exit) or
  // until the deadline, then kills what is left. Returns the seconds waited.
  double WaitAll(double deadline_s) {
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    for (;;) {
      bool pending = false;
      for (Rank& rk : ranks_) {
        if (!rk.process.running() || rk.done) continue;
        if (auto st = rk.process.TryWait(/*report_stopped=*/true)) {
          rk.status = *st;
          rk.done = true;
        } else {
          pending = true;
        }
      }
      if (!pending || seconds() > deadline_s) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return seconds();
  }

  void TearDown() override {
    for (Rank& rk : ranks_) {
      if (rk.log.empty()) continue;  // not launched
      if (rk.process.running()) {  // hung, or stopped on purpose: the handle kills and reaps it
        if (!rk.done) ADD_FAILURE() << "rank pid " << rk.process.pid() << " hung and was killed";
        rk.process = Subprocess();
      }
      if (HasFailure()) std::cerr << "---- " << rk.log << "\n" << ReadFile(rk.log);
    }
  }

  int ExitCode(int r) const {
    const Rank& rk = ranks_[r];
    return rk.done ? rk.status.exit_code() : -1;
  }

  std::vector<Rank> ranks_;
  int launches_ = 0;
};

std::vector<int> All(int n) {
  std::vector<int> v;
  for (int r = 0; r < n; ++r) v.push_back(r);
  return v;
}

class CommGlooWorldTest : public CommGlooTest, public ::testing::WithParamInterface<int> {};

TEST_P(CommGlooWorldTest, CollectivesMatchLocallyComputedResults) {
  const int n = GetParam();
  Launch(n, All(n), "check", /*timeout_ms=*/60000);
  WaitAll(240);
  for (int r = 0; r < n; ++r) EXPECT_EQ(ExitCode(r), 0) << "rank " << r;
}

TEST_P(CommGlooWorldTest, KilledRankMakesOthersFailWithUnavailable) {
  const int n = GetParam();
  constexpr int kTimeoutMs = 8000;
  // Rank 0 hosts the store: losing it after set-up must not matter more than losing any rank.
  for (int victim : {n - 1, 0}) {
    Launch(n, All(n), "kill", kTimeoutMs, victim);
    WaitAll(120);
    for (int r = 0; r < n; ++r) {
      if (r == victim) {
        EXPECT_TRUE(ranks_[r].done && ranks_[r].status.term_signal() == SIGKILL);
        continue;
      }
      EXPECT_EQ(ExitCode(r), 3) << "rank " << r << " victim " << victim;
      // The failure must come within the collective timeout (+ the wait grace), not later.
      const std::string log = ReadFile(ranks_[r].log);
      const auto pos = log.find("elapsed_ms=");
      ASSERT_NE(pos, std::string::npos) << log;
      EXPECT_LE(std::stoi(log.substr(pos + 11)), kTimeoutMs + 2000) << log;
    }
    if (HasFailure()) return;
    TearDown();
    ranks_.clear();
  }
}

INSTANTIATE_TEST_SUITE_P(CommGlooWorld, CommGlooWorldTest, ::testing::Values(2, 4));

TEST_F(CommGlooTest, HungRankMakesOthersFailAfterTheTimeout) {
  constexpr int kTimeoutMs = 3000;
  Launch(4, All(4), "stop", kTimeoutMs, /*victim=*/2);
  WaitAll(120);
  EXPECT_TRUE(ranks_[2].done && ranks_[2].status.stopped());
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(ExitCode(r), 3) << "rank " << r;
    const std::string log = ReadFile(ranks_[r].log);
    const auto pos = log.find("elapsed_ms=");
    ASSERT_NE(pos, std::string::npos) << log;
    const int ms = std::stoi(log.substr(pos + 11));
    // Nobody can tell a hung peer from a slow one before the timeout; everyone gives up by then
    // (the first to time out tears its connections down, which frees the rest).
    EXPECT_GE(ms, kTimeoutMs - 100) << log;
    EXPECT_LE(ms, 2 * kTimeoutMs + 2000) << log;
  }
}

TEST_F(CommGlooTest, MissingRankFailsTheRendezvousWithUnavailable) {
  Launch(2, {0}, "check", /*timeout_ms=*/3000);
  const double waited = WaitAll(60);
  EXPECT_EQ(ExitCode(0), 2);
  EXPECT_LT(waited, 30.0);
  EXPECT_NE(ReadFile(ranks_[0].log).find("UNAVAILABLE"), std::string::npos);
}

TEST(CommFreePort, PicksABindablePort) {
  auto a = PickFreePort();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(*a, 0);
  EXPECT_LE(*a, 65535);
  EXPECT_FALSE(PickFreePort("no-such-host.invalid").ok());
}

}  // namespace
}  // namespace ditserve::comm
