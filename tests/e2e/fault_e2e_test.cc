// Faults driven through the real binaries: ditserve-frontend spawning 2 CPU ditserve-worker
// processes (Gloo) on the flux1-tiny fixture. Each test starts its own server, breaks it the way
// production breaks (SIGKILL of a rank, SIGSTOP of a rank, a worker that cannot start, SIGTERM of
// the frontend with work in flight) and checks what README promises: how the request in flight
// ends and how fast, that health goes NOT_SERVING and back, that queued requests are not lost,
// that the next request returns diffusers' image, and that no worker process is left behind.
// The measured recovery times are printed (and recorded as test properties) for README.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <fstream>
#include <sstream>
#include <thread>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_png.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

using Seconds = std::chrono::duration<double>;
using SteadyClock = std::chrono::steady_clock;

// Many short steps (128 x 128 = 1024 image tokens): still denoising when the fault hits.
v1::GenerateRequest SlowRequest(uint32_t steps = 200) {
  v1::GenerateRequest r;
  r.set_prompt("a slow request");
  r.set_height(128);
  r.set_width(128);
  r.set_num_inference_steps(steps);
  r.set_max_sequence_length(32);
  r.set_seed(1);
  return r;
}

bool ProcessExists(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] != 'Z';
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One streaming generation on its own thread; records when it started denoising and how it ended.
class StreamCall {
 public:
  StreamCall(std::shared_ptr<grpc::Channel> channel, v1::GenerateRequest req,
             std::chrono::seconds timeout)
      : stub_(v1::ImageGeneration::NewStub(std::move(channel))) {
    ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
    thread_ = std::thread([this, req] {
      auto reader = stub_->GenerateStream(&ctx_, req);
      v1::GenerateEvent ev;
      while (reader->Read(&ev)) {
        if (ev.has_progress()) steps_.store(ev.progress().step());
        if (ev.has_result()) image_ = ev.result().image();
      }
      status_ = reader->Finish();
      ended_at_ = SteadyClock::now();
      done_.store(true);
    });
  }
  ~StreamCall() {
    ctx_.TryCancel();
    if (thread_.joinable()) thread_.join();
  }
  // Waits until the job has made `n` steps (it is denoising), or the timeout.
  bool WaitForStep(uint32_t n, std::chrono::seconds timeout) {
    const auto until = SteadyClock::now() + timeout;
    while (SteadyClock::now() < until && !done_.load()) {
      if (steps_.load() >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return steps_.load() >= n;
  }
  bool WaitDone(std::chrono::seconds timeout) {
    const auto until = SteadyClock::now() + timeout;
    while (SteadyClock::now() < until && !done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (done_.load() && thread_.joinable()) thread_.join();
    return done_.load();
  }
  const grpc::Status& status() const { return status_; }
  const std::string& image() const { return image_; }
  SteadyClock::time_point ended_at() const { return ended_at_; }

 private:
  std::unique_ptr<v1::ImageGeneration::Stub> stub_;
  grpc::ClientContext ctx_;
  std::thread thread_;
  std::atomic<uint32_t> steps_{0};
  std::atomic<bool> done_{false};
  grpc::Status status_;
  std::string image_;
  SteadyClock::time_point ended_at_;
};

class FaultE2E : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--model", FixturesDir() + "/flux1-tiny", "--spawn-workers", "2",
                                     "--max-queue", "4", "--log-level", "info"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto server = ServerProcess::Start(args);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (!server_) return;
    // A stopped worker must not outlive a failed test.
    for (const auto& [rank, pid] : server_->WorkerPids()) ::kill(pid, SIGKILL);
    server_->Stop(std::chrono::seconds(20));
  }
  void Record(const std::string& key, double seconds) {
    std::printf("[measured] %s: %.2f s\n", key.c_str(), seconds);
    RecordProperty(key, std::to_string(seconds));
  }
  // Waits for a health state; returns when it was first seen (nullopt after the timeout).
  std::optional<SteadyClock::time_point> WaitForHealth(const std::string& state, Seconds timeout) {
    const auto until = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(timeout);
    while (SteadyClock::now() < until) {
      if (server_->Health() == state) return SteadyClock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  grpc::Status Generate(const v1::GenerateRequest& req, v1::GenerateResponse* resp,
                        std::chrono::seconds timeout = std::chrono::seconds(180)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    return v1::ImageGeneration::NewStub(server_->Channel())->Generate(&ctx, req, resp);
  }

  // The fault scenario shared by the rank-death and rank-hang tests: a slow request denoising, a
  // fixture request queued behind it, `fault` applied to the worker of `rank`. The slow request
  // must end UNAVAILABLE within `fail_within`, health must go NOT_SERVING then SERVING, the
  // queued request must run on the re-formed group and return diffusers' image, and the faulty
  // process must be gone.
  void BreakRankMidRequest(int rank, int fault, Seconds fail_within, const std::string& label) {
    ASSERT_TRUE(server_->WaitUntilServing(std::chrono::seconds(180))) << server_->log_path();
    const std::map<int, pid_t> before = server_->WorkerPids();
    ASSERT_EQ(before.size(), 2u) << "expected two spawned workers";
    StreamCall slow(server_->Channel(), SlowRequest(), std::chrono::seconds(600));
    ASSERT_TRUE(slow.WaitForStep(2, std::chrono::seconds(120))) << "the slow request never started";
    v1::GenerateRequest queued_req = Flux1FixtureGenerateRequest();
    queued_req.set_request_id(label + "-queued");
    StreamCall queued(server_->Channel(), queued_req, std::chrono::seconds(300));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // admitted behind the slow one

    const pid_t victim = before.at(rank);
    const auto fault_at = SteadyClock::now();
    ASSERT_EQ(::kill(victim, fault), 0);

    ASSERT_TRUE(slow.WaitDone(std::chrono::seconds(static_cast<int>(fail_within.count()) + 30)));
    EXPECT_EQ(slow.status().error_code(), grpc::StatusCode::UNAVAILABLE) << slow.status().error_message();
    const double failed_after = Seconds(slow.ended_at() - fault_at).count();
    Record(label + "_request_failed_after", failed_after);
    EXPECT_LE(failed_after, fail_within.count()) << slow.status().error_message();

    // Health: NOT_SERVING at once (the group broke), then SERVING once re-formed.
    EXPECT_NE(server_->Health(), "SERVING") << "still SERVING after the group broke";
    auto serving_at = WaitForHealth("SERVING", Seconds(180));
    ASSERT_TRUE(serving_at.has_value()) << "never SERVING again; log: " << server_->log_path();
    Record(label + "_serving_again_after", Seconds(*serving_at - fault_at).count());

    // The queued request was not lost: it ran on the re-formed group.
    ASSERT_TRUE(queued.WaitDone(std::chrono::seconds(240)));
    ASSERT_TRUE(queued.status().ok()) << queued.status().error_message();
    ExpectPngMatchesReference(queued.image());

    // The faulty process is gone (killed by the re-forming for a hang), replaced by a new one.
    EXPECT_FALSE(ProcessExists(victim)) << "pid " << victim << " is still there";
    const std::map<int, pid_t> after = server_->WorkerPids();
    ASSERT_EQ(after.size(), 2u);
    EXPECT_NE(after.at(rank), victim);

    // And the next request returns the reference image.
    v1::GenerateResponse resp;
    grpc::Status s = Generate(Flux1FixtureGenerateRequest(), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ExpectPngMatchesReference(resp.image());
  }

  std::unique_ptr<ServerProcess> server_;
};

TEST_F(FaultE2E, KilledNonZeroRankFailsTheRequestAndTheGroupReforms) {
  StartServer();
  BreakRankMidRequest(1, SIGKILL, Seconds(5), "sigkill_rank1");
}

TEST_F(FaultE2E, KilledRankZeroFailsTheRequestAndTheGroupReforms) {
  StartServer();
  BreakRankMidRequest(0, SIGKILL, Seconds(5), "sigkill_rank0");
}

// A stopped rank answers nothing: the heartbeat (default 5 s interval, 15 s timeout) must find it
// within 30 s, far inside the 300 s collective timeout, and the re-forming must kill it.
TEST_F(FaultE2E, HungRankIsDetectedWithinThirtySecondsAndKilled) {
  StartServer();
  BreakRankMidRequest(1, SIGSTOP, Seconds(30), "sigstop_rank1");
  EXPECT_NE(ReadFile(server_->log_path()).find("did not answer a heartbeat"), std::string::npos);
}

// A worker binary that cannot start: the frontend keeps serving health (NOT_SERVING), says why in
// its log, and retries with a growing backoff (README: "Failure handling").
TEST_F(FaultE2E, WorkerThatCannotStartIsRetriedWithBackoffAndExplained) {
  StartServer({"--worker-binary", "/nonexistent/ditserve-worker"});
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(server_->Health(), "NOT_SERVING");
  v1::GenerateResponse resp;
  grpc::Status s = Generate(Flux1FixtureGenerateRequest(), &resp, std::chrono::seconds(10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  const std::string log = ReadFile(server_->log_path());
  EXPECT_NE(log.find("/nonexistent/ditserve-worker"), std::string::npos) << log;
  size_t attempts = 0;
  for (size_t at = log.find("forming the worker group failed"); at != std::string::npos;
       at = log.find("forming the worker group failed", at + 1)) {
    ++attempts;
  }
  EXPECT_GE(attempts, 2u) << log;
  EXPECT_NE(log.find("retrying in 1000 ms"), std::string::npos) << "backoff does not grow: " << log;
}

// A model folder the workers cannot load: the same, with the loader's reason in the log.
TEST_F(FaultE2E, ModelThatCannotLoadIsExplained) {
  const std::string empty = ::testing::TempDir() + "ditserve-fault-empty-model-" + std::to_string(::getpid());
  std::filesystem::create_directories(empty);
  StartServer({"--model", empty});
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(server_->Health(), "NOT_SERVING");
  const std::string log = ReadFile(server_->log_path());
  EXPECT_NE(log.find("forming the worker group failed"), std::string::npos) << log;
  EXPECT_NE(log.find(empty), std::string::npos) << "the log does not name the folder: " << log;
}

// SIGTERM with one request running and two queued: the running one finishes (within the drain
// time), the queued ones end UNAVAILABLE at once, the frontend exits 0 and no worker is left.
TEST_F(FaultE2E, SigtermFinishesTheRunningRequestFailsTheQueuedAndLeavesNoWorker) {
  StartServer({"--drain-seconds", "60"});
  ASSERT_TRUE(server_->WaitUntilServing(std::chrono::seconds(180))) << server_->log_path();
  const std::map<int, pid_t> workers = server_->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  StreamCall running(server_->Channel(), SlowRequest(30), std::chrono::seconds(300));
  ASSERT_TRUE(running.WaitForStep(1, std::chrono::seconds(120)));
  StreamCall queued1(server_->Channel(), SlowRequest(4), std::chrono::seconds(300));
  StreamCall queued2(server_->Channel(), SlowRequest(4), std::chrono::seconds(300));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  const auto term_at = SteadyClock::now();
  server_->Signal(SIGTERM);
  ASSERT_TRUE(queued1.WaitDone(std::chrono::seconds(10)));
  ASSERT_TRUE(queued2.WaitDone(std::chrono::seconds(10)));
  EXPECT_EQ(queued1.status().error_code(), grpc::StatusCode::UNAVAILABLE) << queued1.status().error_message();
  EXPECT_EQ(queued2.status().error_code(), grpc::StatusCode::UNAVAILABLE) << queued2.status().error_message();
  Record("sigterm_queued_failed_after", Seconds(queued1.ended_at() - term_at).count());
  ASSERT_TRUE(running.WaitDone(std::chrono::seconds(120)));
  EXPECT_TRUE(running.status().ok()) << running.status().error_message();
  EXPECT_FALSE(running.image().empty());

  auto exit_status = server_->WaitForExit(std::chrono::seconds(90));
  ASSERT_TRUE(exit_status.has_value()) << "the frontend did not exit";
  EXPECT_TRUE(exit_status->success()) << exit_status->ToString();
  Record("sigterm_exit_after", Seconds(SteadyClock::now() - term_at).count());
  for (const auto& [rank, pid] : workers) {
    EXPECT_FALSE(ProcessExists(pid)) << "worker rank " << rank << " (pid " << pid << ") is left running";
  }
}

}  // namespace
}  // namespace ditserve::testing
