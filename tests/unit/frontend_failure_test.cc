// The frontend's failure paths, through its public gRPC API, against an in-process fake worker
// group (tests/support/fake_worker.h) in --workers mode: a rank that dies or hangs mid-job, a
// cancel, the client's deadline and the default timeout, the SIGTERM drain, --max-batch, failed
// formations (transient, permanent, RetryNow) and the rank's call thread (WorkerRank); requests
// with the step cache on run alone.
// Every wait is woken by the event it waits for (stream events, the group's readiness listener,
// the fake cluster's change notifications), except one look every 10 ms at formation_failure(),
// which nothing notifies; the time bounds are only there to fail, not to pace.
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "ditserve/v1/ditserve.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/frontend_server.h"
#include "server/health_reason.h"
#include "tests/support/fake_worker.h"

namespace ditserve::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeJobRecord;
using testing::FakeRankScript;
using testing::FakeWorkerCluster;
using v1::GenerateEvent;
using v1::GenerateRequest;
using v1::GenerateResponse;

// Generous bounds: the machine running the tests may be busy.
constexpr auto kLong = seconds(20);

GenerateRequest Request(uint32_t steps, uint32_t height = 64, const std::string& id = "") {
  GenerateRequest r;
  r.set_prompt("a fake cat");
  r.set_height(height);
  r.set_width(64);
  r.set_num_inference_steps(steps);
  r.set_max_sequence_length(32);
  r.set_seed(7);
  r.set_request_id(id);
  return r;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Every readiness change of the group, in order, with a wait that the change itself wakes.
class ReadinessLog {
 public:
  explicit ReadinessLog(WorkerGroup* group) : group_(group) {
    id_ = group_->AddReadinessListener([this](bool ready) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        changes_.push_back(ready);
      }
      cv_.notify_all();
    });
  }
  ~ReadinessLog() { group_->RemoveReadinessListener(id_); }

  std::vector<bool> changes() {
    std::lock_guard<std::mutex> lock(mu_);
    return changes_;
  }
  // Waits until `done(changes)` holds.
  bool WaitFor(const std::function<bool(const std::vector<bool>&)>& done) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, Clock::now() + kLong, [&] { return done(changes_); });
  }
  bool WaitUntilReady() {
    return WaitFor([&](const std::vector<bool>&) { return group_->ready(); });
  }

 private:
  WorkerGroup* const group_;
  int id_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> changes_;
};

// One GenerateStream call read on its own thread; its events and final status are waited for.
class Stream {
 public:
  Stream(v1::ImageGeneration::Stub* stub, const GenerateRequest& req,
         std::optional<milliseconds> timeout = std::nullopt) {
    if (timeout) ctx_.set_deadline(std::chrono::system_clock::now() + *timeout);
    reader_ = stub->GenerateStream(&ctx_, req);
    thread_ = std::thread([this] {
      GenerateEvent ev;
      while (reader_->Read(&ev)) {
        std::lock_guard<std::mutex> lock(mu_);
        if (ev.has_progress() && !first_step_at_) first_step_at_ = Clock::now();
        events_.push_back(ev);
        cv_.notify_all();
      }
      grpc::Status s = reader_->Finish();
      std::lock_guard<std::mutex> lock(mu_);
      status_ = s;
      finished_ = true;
      finished_at_ = Clock::now();
      cv_.notify_all();
    });
  }
  ~Stream() {
    ctx_.TryCancel();
    thread_.join();
  }

  void Cancel() { ctx_.TryCancel(); }
  // Waits for the Queued event (the request was admitted).
  bool WaitQueued() {
    return WaitFor([](const GenerateEvent& e) { return e.has_queued(); });
  }
  // Waits for the progress event of `step` (so the request's job is running).
  bool WaitStep(uint32_t step) {
    return WaitFor([&](const GenerateEvent& e) {
      return e.has_progress() && e.progress().step() >= step;
    });
  }
  grpc::Status Finish() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, Clock::now() + kLong, [&] { return finished_; })) {
      return grpc::Status(grpc::StatusCode::UNKNOWN, "the test gave up waiting for the stream");
    }
    return status_;
  }
  Clock::time_point finished_at() {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_at_;
  }
  std::optional<GenerateResponse> result() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : events_) {
      if (e.has_result()) return e.result();
    }
    return std::nullopt;
  }
  // When the first progress event arrived.
  std::optional<Clock::time_point> first_step_at() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_step_at_;
  }

 private:
  bool WaitFor(const std::function<bool(const GenerateEvent&)>& match) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, Clock::now() + kLong, [&] {
      for (const auto& e : events_) {
        if (match(e)) return true;
      }
      return finished_;
    }) && std::any_of(events_.begin(), events_.end(), match);
  }

  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<GenerateEvent>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GenerateEvent> events_;
  std::optional<Clock::time_point> first_step_at_;
  bool finished_ = false;
  grpc::Status status_;
  Clock::time_point finished_at_;
};

// The server's health ("" service) as grpc.health.v1.Health/Watch streams it: every change.
class HealthWatch {
 public:
  explicit HealthWatch(grpc::health::v1::Health::Stub* stub) {
    reader_ = stub->Watch(&ctx_, grpc::health::v1::HealthCheckRequest());
    thread_ = std::thread([this] {
      grpc::health::v1::HealthCheckResponse resp;
      while (reader_->Read(&resp)) {
        std::lock_guard<std::mutex> lock(mu_);
        seen_.push_back(grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()));
        cv_.notify_all();
      }
      reader_->Finish();
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      cv_.notify_all();
    });
  }
  ~HealthWatch() {
    ctx_.TryCancel();
    thread_.join();
  }
  // Waits until the latest status is `status`.
  bool WaitFor(const std::string& status) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, Clock::now() + kLong,
                          [&] { return ended_ || (!seen_.empty() && seen_.back() == status); }) &&
           !seen_.empty() && seen_.back() == status;
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> seen_;
  bool ended_ = false;
};

class FrontendFailureTest : public ::testing::Test {
 protected:
  // Starts `world` fake ranks and a frontend over them (--workers), and waits until SERVING.
  void StartFrontend(int world, const std::function<void(FrontendOptions&)>& tweak = {}) {
    cluster_ = std::make_unique<FakeWorkerCluster>(world);
    ASSERT_TRUE(cluster_->Start().ok());
    for (int r = 0; r < world; ++r) {
      FakeRankScript script;
      script.step_delay = milliseconds(10);
      cluster_->SetScript(r, script);
    }
    options_.model_dir = "";
    options_.workers = absl::StrJoin(cluster_->addresses(), ",");
    options_.listen = "127.0.0.1:0";
    options_.metrics_listen = "";
    options_.max_queue = 4;
    if (tweak) tweak(options_);
    ASSERT_TRUE(ValidateFrontendOptions(options_).ok());
    WorkerGroupOptions group = MakeWorkerGroupOptions(options_, "");
    group.connect_timeout = milliseconds(300);
    group.retry_backoff = milliseconds(50);
    auto server = FrontendServer::Start(options_, group);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    readiness_ = std::make_unique<ReadinessLog>(&server_->group());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ImageGeneration::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
    ASSERT_TRUE(readiness_->WaitUntilReady()) << "the group never formed";
    ASSERT_EQ(Health(), "SERVING");
  }
  // Starts a frontend over `cluster` without waiting for the group (whose Init may be scripted to
  // fail); `tweak` adjusts the group's options.
  void StartFrontendOver(std::unique_ptr<FakeWorkerCluster> cluster,
                         const std::function<void(WorkerGroupOptions&)>& tweak) {
    options_.workers = absl::StrJoin(cluster->addresses(), ",");
    options_.listen = "127.0.0.1:0";
    options_.metrics_listen = "";
    WorkerGroupOptions group = MakeWorkerGroupOptions(options_, "");
    tweak(group);
    cluster_ = std::move(cluster);
    auto server = FrontendServer::Start(options_, group);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    readiness_ = std::make_unique<ReadinessLog>(&server_->group());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ImageGeneration::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
  }
  // A cluster of two fake ranks whose rank 1 fails Init with `error`.
  static std::unique_ptr<FakeWorkerCluster> ClusterFailingInit(const absl::Status& error) {
    auto cluster = std::make_unique<FakeWorkerCluster>(2);
    EXPECT_TRUE(cluster->Start().ok());
    FakeRankScript failing;
    failing.init_error = error;
    cluster->SetScript(1, failing);
    return cluster;
  }
  void TearDown() override {
    if (cluster_) cluster_->HoldInit(false);
    readiness_.reset();
    server_.reset();  // drains (no drain time) before the fake ranks go
    cluster_.reset();
  }

  grpc::Status Generate(const GenerateRequest& req, GenerateResponse* resp,
                        std::optional<milliseconds> timeout = kLong) {
    grpc::ClientContext ctx;
    if (timeout) ctx.set_deadline(std::chrono::system_clock::now() + *timeout);
    return stub_->Generate(&ctx, req, resp);
  }
  std::string Health() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = health_->Check(&ctx, req, &resp);
    if (!s.ok()) return "error: " + s.error_message();
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  }
  // The jobs every rank saw, once each rank's job `index` has ended (left "running").
  bool WaitJobEnded(size_t index) {
    return cluster_->WaitFor([&] {
      for (int r = 0; r < cluster_->world_size(); ++r) {
        auto jobs = cluster_->jobs(r);
        if (jobs.size() <= index || jobs[index].outcome == "running") return false;
      }
      return true;
    });
  }
  // Every rank got a Cancel for the job, stopped at a step boundary ("cancelled"), and all at
  // the same step, before the end.
  void ExpectEveryRankStoppedAtTheSameStep(size_t index) {
    ASSERT_TRUE(WaitJobEnded(index));
    // The frontend sends Cancel to the ranks one after the other; the first one already stops
    // them all, so wait for the others' calls to arrive.
    const std::string job_id = cluster_->jobs(0)[index].job_id;
    cluster_->WaitFor([&] {
      for (int r = 0; r < cluster_->world_size(); ++r) {
        const auto c = cluster_->cancels(r);
        if (std::find(c.begin(), c.end(), job_id) == c.end()) return false;
      }
      return true;
    });
    const FakeJobRecord first = cluster_->jobs(0)[index];
    for (int r = 0; r < cluster_->world_size(); ++r) {
      const FakeJobRecord job = cluster_->jobs(r)[index];
      EXPECT_EQ(job.outcome, "cancelled") << "rank " << r;
      EXPECT_EQ(job.steps_done, first.steps_done) << "rank " << r;
      EXPECT_LT(job.steps_done, job.steps) << "rank " << r;
      const auto cancels = cluster_->cancels(r);
      EXPECT_NE(std::find(cancels.begin(), cancels.end(), job.job_id), cancels.end())
          << "rank " << r << " got no Cancel for " << job.job_id;
    }
  }

  FrontendOptions options_;
  std::unique_ptr<FakeWorkerCluster> cluster_;
  std::unique_ptr<FrontendServer> server_;
  std::unique_ptr<ReadinessLog> readiness_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ImageGeneration::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

TEST_F(FrontendFailureTest, ASuccessfulJobRunsOnEveryRank) {
  StartFrontend(2);
  GenerateResponse resp;
  grpc::Status s = Generate(Request(3, 64, "ok-1"), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.request_id(), "ok-1");
  EXPECT_EQ(resp.image(), "fake image for ok-1");
  // The workers return pixels only (the fake's outputs carry nothing else): the frontend fills in
  // the response's metadata from the request.
  EXPECT_EQ(resp.format(), v1::OUTPUT_FORMAT_PNG);
  EXPECT_EQ(resp.height(), 64u);
  EXPECT_EQ(resp.width(), 64u);
  EXPECT_EQ(resp.seed(), 7u);
  EXPECT_EQ(resp.num_inference_steps(), 3u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cluster_->jobs(r).size(), 1u);
    EXPECT_EQ(cluster_->jobs(r)[0].outcome, "ok");
    EXPECT_EQ(cluster_->jobs(r)[0].steps_done, 3u);
    EXPECT_EQ(cluster_->jobs(r)[0].request_ids, std::vector<std::string>{"ok-1"});
  }
  EXPECT_EQ(server_->group().formations(), 1u);
}

TEST_F(FrontendFailureTest, RankDeathMidJobFailsUnavailableThenTheGroupReforms) {
  StartFrontend(2);
  FakeRankScript dies;
  dies.step_delay = milliseconds(10);
  dies.die_at_step = 3;
  cluster_->SetScript(1, dies);

  GenerateResponse resp;
  grpc::Status s = Generate(Request(8), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "re-forming")) << s.error_message();
  ASSERT_TRUE(WaitJobEnded(0));
  EXPECT_EQ(cluster_->jobs(1)[0].outcome, "died");
  EXPECT_EQ(cluster_->jobs(1)[0].steps_done, 2u);
  EXPECT_EQ(cluster_->jobs(0)[0].steps_done, 2u);
  EXPECT_TRUE(absl::StartsWith(cluster_->jobs(0)[0].outcome, "failed"))
      << cluster_->jobs(0)[0].outcome;

  // Not ready while the rank is gone: readiness went false, health says NOT_SERVING, and new
  // requests are refused as UNAVAILABLE.
  ASSERT_TRUE(readiness_->WaitFor([](const std::vector<bool>& c) { return !c.empty() && !c.back(); }));
  EXPECT_FALSE(server_->group().ready());
  EXPECT_EQ(Health(), "NOT_SERVING");
  EXPECT_EQ(Generate(Request(2), &resp).error_code(), grpc::StatusCode::UNAVAILABLE);

  // The worker comes back (as a supervisor would restart it): the group re-forms by itself.
  ASSERT_TRUE(cluster_->Restart(1).ok());
  ASSERT_TRUE(readiness_->WaitUntilReady());
  EXPECT_EQ(server_->group().formations(), 2u);
  EXPECT_EQ(Health(), "SERVING");
  // Both ranks joined the new group (rank 1 as its restarted incarnation).
  EXPECT_EQ(cluster_->ready_inits(0), 2);
  EXPECT_EQ(cluster_->ready_inits(1), 2);
  s = Generate(Request(3, 64, "after-death"), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.request_id(), "after-death");
}

TEST_F(FrontendFailureTest, HungRankFailsUnavailableAfterTheCollectiveTimeout) {
  constexpr int kTimeoutMs = 400;
  StartFrontend(2, [](FrontendOptions& o) { o.collective_timeout_ms = kTimeoutMs; });
  // The frontend handed its collective timeout to every rank.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cluster_->init_requests(r).size(), 1u);
    EXPECT_EQ(cluster_->init_requests(r)[0].collective_timeout_ms(), kTimeoutMs);
  }
  FakeRankScript hangs;
  hangs.step_delay = milliseconds(10);
  hangs.hang_at_step = 2;
  cluster_->SetScript(1, hangs);
  cluster_->HoldInit(true);  // keep the re-formed group from becoming ready until released

  const Clock::time_point sent = Clock::now();
  Stream stream(stub_.get(), Request(8));
  ASSERT_TRUE(stream.WaitStep(1));
  const Clock::time_point step1 = *stream.first_step_at();
  grpc::Status s = stream.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "timed out")) << s.error_message();
  // Rank 0 waited the collective timeout for the hung rank in step 2's collective, no less: its
  // wait began after the request was sent (measured from step 1's arrival at the client instead,
  // the bound fails whenever that event takes longer to arrive than the 10 ms from step 1 to the
  // wait, as under TSan). And the frontend did not wait for the hung rank after that (no more than
  // a generous margin after step 1).
  const double since_sent = std::chrono::duration<double>(stream.finished_at() - sent).count();
  const double since_step1 = std::chrono::duration<double>(stream.finished_at() - step1).count();
  EXPECT_GE(since_sent, kTimeoutMs / 1000.0);
  EXPECT_LT(since_step1, kTimeoutMs / 1000.0 + 5.0);
  ASSERT_TRUE(WaitJobEnded(0));
  EXPECT_EQ(cluster_->jobs(1)[0].outcome, "hung");
  EXPECT_EQ(cluster_->jobs(1)[0].steps_done, 1u);
  EXPECT_TRUE(absl::StrContains(cluster_->jobs(0)[0].outcome, "timed out"))
      << cluster_->jobs(0)[0].outcome;

  ASSERT_TRUE(readiness_->WaitFor([](const std::vector<bool>& c) { return !c.empty() && !c.back(); }));
  // The re-formation is under way (every rank got its second Init) and held there.
  ASSERT_TRUE(cluster_->WaitFor([&] { return cluster_->init_calls(0) == 2 && cluster_->init_calls(1) == 2; }));
  EXPECT_EQ(Health(), "NOT_SERVING");
  cluster_->HoldInit(false);
  ASSERT_TRUE(readiness_->WaitUntilReady());
  EXPECT_EQ(server_->group().formations(), 2u);
  GenerateResponse resp;
  ASSERT_TRUE(Generate(Request(2), &resp).ok());
}

TEST_F(FrontendFailureTest, CancelReachesEveryRankAndTheyStopAtTheSameStep) {
  StartFrontend(3);
  Stream stream(stub_.get(), Request(200));
  ASSERT_TRUE(stream.WaitStep(2));
  stream.Cancel();
  EXPECT_EQ(stream.Finish().error_code(), grpc::StatusCode::CANCELLED);
  ExpectEveryRankStoppedAtTheSameStep(0);
  // A cancel leaves the group intact: no re-formation, and the next job runs at once.
  EXPECT_EQ(server_->group().formations(), 1u);
  EXPECT_TRUE(server_->group().ready());
  GenerateResponse resp;
  grpc::Status s = Generate(Request(2), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(FrontendFailureTest, ClientDeadlineIsDeadlineExceededAndTheRanksStop) {
  StartFrontend(2);
  const auto start = Clock::now();
  GenerateResponse resp;
  grpc::Status s = Generate(Request(200), &resp, milliseconds(400));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_LT(SecondsSince(start), 10.0);
  ExpectEveryRankStoppedAtTheSameStep(0);
  EXPECT_EQ(server_->group().formations(), 1u);
  s = Generate(Request(2), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(FrontendFailureTest, DefaultTimeoutIsDeadlineExceededWithTheDeadlineWording) {
  StartFrontend(2, [](FrontendOptions& o) { o.default_timeout_seconds = 0.4; });
  GenerateResponse resp;
  // No client deadline: the server's --default-timeout applies, and its status reaches the
  // client as the server worded it.
  grpc::Status s = Generate(Request(200), &resp, std::nullopt);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "deadline exceeded after ")) << s.error_message();
  ExpectEveryRankStoppedAtTheSameStep(0);
}

TEST_F(FrontendFailureTest, DrainLetsTheRunningJobFinishAndFailsTheQueuedAtOnce) {
  StartFrontend(2);
  // Long enough (1.5 s) to look at the draining server while it runs.
  Stream running(stub_.get(), Request(150, 64, "running"));
  ASSERT_TRUE(running.WaitStep(1));
  Stream queued(stub_.get(), Request(3, 64, "queued"));
  ASSERT_TRUE(queued.WaitQueued());
  HealthWatch health(health_.get());
  ASSERT_TRUE(health.WaitFor("SERVING"));

  std::thread drain([&] { server_->Drain(seconds(30)); });
  // Draining: no longer serving, and new requests are refused at once.
  ASSERT_TRUE(health.WaitFor("NOT_SERVING"));
  GenerateResponse resp;
  grpc::Status refused = Generate(Request(2), &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "shutting down")) << refused.error_message();

  // The queued request ends at once (its client can retry elsewhere), while the job still runs.
  const grpc::Status q = queued.Finish();
  EXPECT_EQ(q.error_code(), grpc::StatusCode::UNAVAILABLE) << q.error_message();
  EXPECT_TRUE(absl::StrContains(q.error_message(), "shutting down")) << q.error_message();
  EXPECT_TRUE(running.Finish().ok()) << running.Finish().error_message();
  drain.join();
  for (int r = 0; r < 2; ++r) {
    const auto jobs = cluster_->jobs(r);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].outcome, "ok");
  }
}

TEST_F(FrontendFailureTest, DrainTimeOverCancelsTheJobAndFailsTheQueue) {
  StartFrontend(2);
  Stream running(stub_.get(), Request(200, 64, "running"));
  ASSERT_TRUE(running.WaitStep(1));
  Stream queued(stub_.get(), Request(3, 64, "queued"));
  ASSERT_TRUE(queued.WaitQueued());

  const auto start = Clock::now();
  server_->Drain(milliseconds(300));
  const double drained = SecondsSince(start);
  EXPECT_GE(drained, 0.3);
  EXPECT_LT(drained, 10.0);
  const grpc::Status r = running.Finish();
  const grpc::Status q = queued.Finish();
  EXPECT_EQ(r.error_code(), grpc::StatusCode::UNAVAILABLE) << r.error_message();
  EXPECT_EQ(q.error_code(), grpc::StatusCode::UNAVAILABLE) << q.error_message();
  EXPECT_TRUE(absl::StrContains(q.error_message(), "shutting down")) << q.error_message();
  // The running job was cancelled on the ranks (stopped together), the queued one never ran.
  ExpectEveryRankStoppedAtTheSameStep(0);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(cluster_->jobs(rank).size(), 1u);
}

TEST_F(FrontendFailureTest, MaxBatchRunsTwoSameShapeRequestsAsOneJob) {
  StartFrontend(2, [](FrontendOptions& o) { o.max_batch = 2; });
  // Occupy the group so the next two requests meet in the queue.
  Stream blocker(stub_.get(), Request(200, 64, "blocker"));
  ASSERT_TRUE(blocker.WaitStep(1));
  Stream a(stub_.get(), Request(3, 64, "a"));
  ASSERT_TRUE(a.WaitQueued());
  Stream b(stub_.get(), Request(3, 64, "b"));
  ASSERT_TRUE(b.WaitQueued());
  blocker.Cancel();

  ASSERT_TRUE(a.Finish().ok()) << a.Finish().error_message();
  ASSERT_TRUE(b.Finish().ok()) << b.Finish().error_message();
  EXPECT_EQ(a.result()->request_id(), "a");
  EXPECT_EQ(a.result()->image(), "fake image for a");
  EXPECT_EQ(b.result()->request_id(), "b");
  EXPECT_EQ(b.result()->image(), "fake image for b");
  for (int r = 0; r < 2; ++r) {
    const auto jobs = cluster_->jobs(r);
    ASSERT_EQ(jobs.size(), 2u) << "rank " << r;
    EXPECT_EQ(jobs[0].batch_size, 1u);
    EXPECT_EQ(jobs[1].batch_size, 2u);
    EXPECT_EQ(jobs[1].request_ids, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(jobs[1].outcome, "ok");
  }
}

TEST_F(FrontendFailureTest, MaxBatchNeverBatchesDifferentShapes) {
  StartFrontend(2, [](FrontendOptions& o) { o.max_batch = 4; });
  Stream blocker(stub_.get(), Request(200, 64, "blocker"));
  ASSERT_TRUE(blocker.WaitStep(1));
  Stream tall(stub_.get(), Request(3, 128, "tall"));
  ASSERT_TRUE(tall.WaitQueued());
  Stream square(stub_.get(), Request(3, 64, "square"));
  ASSERT_TRUE(square.WaitQueued());
  Stream longer(stub_.get(), Request(4, 64, "more-steps"));
  ASSERT_TRUE(longer.WaitQueued());
  blocker.Cancel();

  for (Stream* s : {&tall, &square, &longer}) {
    grpc::Status st = s->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  for (int r = 0; r < 2; ++r) {
    const auto jobs = cluster_->jobs(r);
    ASSERT_EQ(jobs.size(), 4u) << "rank " << r;
    for (size_t j = 1; j < jobs.size(); ++j) {
      EXPECT_EQ(jobs[j].batch_size, 1u) << jobs[j].job_id;
      EXPECT_EQ(jobs[j].outcome, "ok");
    }
    EXPECT_EQ(jobs[1].request_ids, std::vector<std::string>{"tall"});
    EXPECT_EQ(jobs[2].request_ids, std::vector<std::string>{"square"});
    EXPECT_EQ(jobs[3].request_ids, std::vector<std::string>{"more-steps"});
  }
}

// The step cache: a request with it on (by the server's default or its own cache_threshold) runs
// alone with its threshold in the job; requests with it off still batch; the response's timings
// carry rank 0's full / cached pass counts.
TEST_F(FrontendFailureTest, MaxBatchNeverBatchesARequestWithTheStepCacheOn) {
  StartFrontend(2, [](FrontendOptions& o) {
    o.max_batch = 4;
    o.default_cache_threshold = 0.1;
  });
  GenerateRequest blocker_request = Request(200, 64, "blocker");
  blocker_request.set_cache_threshold(0);
  Stream blocker(stub_.get(), blocker_request);
  ASSERT_TRUE(blocker.WaitStep(1));
  Stream by_default(stub_.get(), Request(3, 64, "default"));  // absent: the server's 0.1
  ASSERT_TRUE(by_default.WaitQueued());
  GenerateRequest own_request = Request(3, 64, "own");
  own_request.set_cache_threshold(0.1);
  Stream own(stub_.get(), own_request);
  ASSERT_TRUE(own.WaitQueued());
  std::vector<std::unique_ptr<Stream>> off;
  for (const char* id : {"off-a", "off-b"}) {
    GenerateRequest r = Request(3, 64, id);
    r.set_cache_threshold(0);
    off.push_back(std::make_unique<Stream>(stub_.get(), r));
    ASSERT_TRUE(off.back()->WaitQueued());
  }
  blocker.Cancel();

  for (Stream* s : {&by_default, &own, off[0].get(), off[1].get()}) {
    grpc::Status st = s->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  // The fake ranks answer a job with the cache on with 1 full pass and the rest cached.
  EXPECT_EQ(by_default.result()->timings().full_steps(), 1u);
  EXPECT_EQ(by_default.result()->timings().cached_steps(), 2u);
  EXPECT_EQ(own.result()->timings().cached_steps(), 2u);
  EXPECT_EQ(off[1]->result()->timings().full_steps(), 3u);
  EXPECT_EQ(off[1]->result()->timings().cached_steps(), 0u);
  for (int r = 0; r < 2; ++r) {
    const auto jobs = cluster_->jobs(r);
    ASSERT_EQ(jobs.size(), 4u) << "rank " << r;
    EXPECT_EQ(jobs[0].cache_threshold, 0.0);
    EXPECT_EQ(jobs[1].request_ids, std::vector<std::string>{"default"});
    EXPECT_EQ(jobs[1].cache_threshold, 0.1);
    EXPECT_EQ(jobs[2].request_ids, std::vector<std::string>{"own"});
    EXPECT_EQ(jobs[2].cache_threshold, 0.1);
    EXPECT_EQ(jobs[3].request_ids, (std::vector<std::string>{"off-a", "off-b"}));
    EXPECT_EQ(jobs[3].cache_threshold, 0.0);
    EXPECT_EQ(cluster_->cached_steps(r), 4u) << "rank " << r;
  }
}

TEST_F(FrontendFailureTest, FailedInitIsRetriedUntilTheGroupForms) {
  // Rank 1's Init fails (a transient code): the group never becomes ready and is formed again and
  // again, quickly.
  StartFrontendOver(ClusterFailingInit(absl::InternalError("scripted load failure")),
                    [](WorkerGroupOptions& g) {
                      g.retry_backoff = milliseconds(20);
                      g.permanent_retry_backoff = seconds(600);  // unused: INTERNAL is transient
                    });
  ASSERT_TRUE(cluster_->WaitFor([&] { return cluster_->init_calls(1) >= 2; }));
  EXPECT_FALSE(server_->group().ready());
  EXPECT_EQ(server_->group().permanent_failures(), 0u);
  ASSERT_TRUE(server_->group().formation_failure().has_value());
  EXPECT_FALSE(server_->group().formation_failure()->permanent);
  EXPECT_EQ(Health(), "NOT_SERVING");
  GenerateResponse resp;
  grpc::Status s = Generate(Request(2), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "not ready")) << s.error_message();

  cluster_->SetScript(1, FakeRankScript());
  ASSERT_TRUE(readiness_->WaitUntilReady());
  EXPECT_EQ(server_->group().formations(), 1u);
  EXPECT_EQ(Health(), "SERVING");
  s = Generate(Request(2), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(server_->group().formation_failure().has_value());
}

// The rank's thread that carries its Init and Run calls: one call at a time, in order, on one
// thread that is not the caller's; the destructor runs the calls already posted, then joins.
TEST(WorkerRank, PostedCallsRunInOrderOnTheRanksOwnThreadAndAllRunBeforeItGoes) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<int> order;
  std::set<std::thread::id> threads;
  {
    WorkerRank rank("127.0.0.1:1", nullptr);  // never connects: the calls do not use the stub
    rank.Post([&] {
      // Holds the thread until every call is queued behind it.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
    });
    for (int i = 0; i < 50; ++i) {
      rank.Post([&, i] {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
        threads.insert(std::this_thread::get_id());
      });
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      release = true;
    }
    cv.notify_all();
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

TEST(PermanentInitError, RefusedModelsAndSettingsArePermanentTheRestTransient) {
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
                    absl::StatusCode::kNotFound, absl::StatusCode::kUnimplemented}) {
    EXPECT_TRUE(IsPermanentInitError(code)) << absl::StatusCodeToString(code);
  }
  for (auto code : {absl::StatusCode::kOk, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kResourceExhausted,
                    absl::StatusCode::kInternal, absl::StatusCode::kCancelled,
                    absl::StatusCode::kUnknown}) {
    EXPECT_FALSE(IsPermanentInitError(code)) << absl::StatusCodeToString(code);
  }
}

// A model the workers refuse (rank 1's Init: INVALID_ARGUMENT; rank 0's then fails UNAVAILABLE, its
// peer gone): the refusal is the reason, and the attempts come with a doubling delay.
TEST_F(FrontendFailureTest, PermanentInitErrorIsTheReasonAndIsRetriedWithAGrowingDelay) {
  const auto first = milliseconds(300);
  StartFrontendOver(
      ClusterFailingInit(absl::InvalidArgumentError(
          "text_encoder/config.json: model_type: expected a string, got an object")),
      [&](WorkerGroupOptions& g) {
        g.retry_backoff = milliseconds(20);
        g.permanent_retry_backoff = first;
        g.permanent_retry_max = first * 2;
      });
  const Clock::time_point start = Clock::now();
  // Attempts at 0, 300 ms and 900 ms (300 + 600): three Init calls take at least 900 ms; transient
  // retries (20, 40 ms) would take 60.
  ASSERT_TRUE(cluster_->WaitFor([&] { return cluster_->init_calls(1) >= 3; }, kLong));
  EXPECT_GE(SecondsSince(start), 0.85);
  EXPECT_FALSE(server_->group().ready());
  EXPECT_EQ(Health(), "NOT_SERVING");
  const auto failure = server_->group().formation_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_TRUE(failure->permanent);
  EXPECT_EQ(failure->status.code(), absl::StatusCode::kInvalidArgument) << failure->status;
  EXPECT_TRUE(absl::StrContains(failure->status.message(), "rank 1 Init: text_encoder/config.json"))
      << failure->status;
  EXPECT_GE(failure->attempts, 2u);
  EXPECT_GE(server_->group().permanent_failures(), 2u);
  EXPECT_EQ(server_->group().formations(), 0u);
  // As the public API says it.
  const std::optional<v1::NotServingReason> reason = NotServingReasonOf(server_->group());
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(reason->code(), "INVALID_ARGUMENT");
  EXPECT_TRUE(absl::StrContains(reason->message(), "model_type: expected a string"))
      << reason->message();
  EXPECT_TRUE(reason->permanent());
  EXPECT_GE(reason->attempts(), 2u);
}

// The operator fixes the model and asks (SIGHUP: RetryNow): the group forms at once, not after the
// (here ten-minute) permanent backoff.
TEST_F(FrontendFailureTest, RetryNowFormsAtOnceAfterAPermanentFailure) {
  StartFrontendOver(ClusterFailingInit(absl::NotFoundError("transformer/config.json: no such file")),
                    [](WorkerGroupOptions& g) { g.permanent_retry_backoff = seconds(600); });
  // The failure is recorded after the ranks' last change: nothing notifies it, so look every 10 ms.
  const Clock::time_point give_up = Clock::now() + kLong;
  while (!server_->group().formation_failure() && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(server_->group().formation_failure().has_value());
  EXPECT_TRUE(server_->group().formation_failure()->permanent);
  EXPECT_EQ(server_->group().permanent_failures(), 1u);
  EXPECT_EQ(cluster_->init_calls(1), 1);

  cluster_->SetScript(1, FakeRankScript());
  server_->group().RetryNow();
  ASSERT_TRUE(readiness_->WaitUntilReady()) << "RetryNow did not form the group";
  EXPECT_EQ(cluster_->init_calls(1), 2);
  EXPECT_EQ(Health(), "SERVING");
  EXPECT_FALSE(server_->group().formation_failure().has_value());
  EXPECT_FALSE(NotServingReasonOf(server_->group()).has_value());
  GenerateResponse resp;
  grpc::Status s = Generate(Request(2), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace ditserve::server
