// The frontend's one deadline mapping (server/deadline.h) and the signalling primitives that
// replaced its polling loops: a request's cancellation (PendingRequest) and Wakeup.
#include <gtest/gtest.h>

#include <thread>

#include "server/admission_queue.h"
#include "server/deadline.h"
#include "server/pending_request.h"
#include "server/wakeup.h"

namespace ditserve::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SystemClock = std::chrono::system_clock;

// One instant on both clocks, as the RPC edge takes it at arrival.
struct Instant {
  Clock::time_point steady = Clock::now();
  SystemClock::time_point system = SystemClock::now();
};

TEST(Deadline, ClientDeadlineEarlierThanTheDefaultWins) {
  const Instant t;
  const Deadline d = Deadline::ForClient(t.system + milliseconds(1500), seconds(600), t.steady,
                                         t.system);
  EXPECT_EQ(d.start(), t.steady);
  EXPECT_EQ(d.when(), t.steady + milliseconds(1500));
}

TEST(Deadline, DefaultTimeoutEarlierThanTheClientWins) {
  const Instant t;
  const Deadline d =
      Deadline::ForClient(t.system + seconds(60), std::chrono::duration<double>(2.5), t.steady,
                          t.system);
  EXPECT_EQ(d.when(), t.steady + milliseconds(2500));
}

TEST(Deadline, NoClientDeadlineMeansTheDefault) {
  const Instant t;
  // What grpc::ServerContext::deadline() reports without a client deadline (gRPC's infinite
  // future), and a deadline years away.
  for (SystemClock::time_point none :
       {SystemClock::time_point::max(), t.system + std::chrono::hours(24 * 365 * 5)}) {
    const Deadline d = Deadline::ForClient(none, seconds(600), t.steady, t.system);
    EXPECT_EQ(d.when(), t.steady + seconds(600));
  }
}

TEST(Deadline, PastClientDeadlineHasExpiredOnArrival) {
  const Instant t;
  const Deadline d = Deadline::ForClient(t.system - seconds(3), seconds(600), t.steady, t.system);
  EXPECT_EQ(d.when(), t.steady);
  EXPECT_TRUE(d.expired(t.steady));
}

TEST(Deadline, ExpiresExactlyAtItsTime) {
  const Clock::time_point start = Clock::now();
  const Deadline d = Deadline::At(start, start + milliseconds(100));
  EXPECT_FALSE(d.expired(start + milliseconds(99)));
  EXPECT_TRUE(d.expired(start + milliseconds(100)));
  EXPECT_FALSE(Deadline().expired(start + std::chrono::hours(24 * 365)));
}

TEST(Deadline, ExceededErrorHasOneWordingWithTheElapsedTime) {
  const Clock::time_point start = Clock::now();
  const Deadline d = Deadline::At(start, start + seconds(1));
  const absl::Status s = d.ExceededError(start + milliseconds(1500));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "deadline exceeded after 1.500 s");
}

ValidatedRequest Shape(uint32_t height) {
  ValidatedRequest v;
  v.shape.height = height;
  v.shape.width = 64;
  v.shape.steps = 4;
  return v;
}

TEST(PendingRequest, CancelFinishesAtOnceWithItsReasonAndCallsTheListenerOnce) {
  PendingRequest r("a", Shape(64), Deadline());
  int calls = 0;
  r.SetCancelListener([&] { ++calls; });
  v1::GenerateEvent progress;
  progress.mutable_progress()->set_step(1);
  r.PushEvent(progress);
  r.Cancel(absl::UnavailableError("server is shutting down"));
  r.Cancel(absl::CancelledError("again"));
  r.Finish(absl::OkStatus());  // a late result is dropped
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(r.done());
  EXPECT_TRUE(r.cancelled());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  // Undelivered events are dropped with the cancellation.
  EXPECT_FALSE(r.WaitForEvent(Clock::now()).has_value());
}

TEST(PendingRequest, CancelWakesAWaiterAtOnce) {
  PendingRequest r("a", Shape(64), Deadline());
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(20));
    r.Cancel();
  });
  const auto start = Clock::now();
  EXPECT_FALSE(r.WaitForEvent(start + seconds(30)).has_value());
  canceller.join();
  EXPECT_LT(Clock::now() - start, seconds(10));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

TEST(PendingRequest, ExpiryUsesTheDeadlineWording) {
  const Clock::time_point start = Clock::now();
  PendingRequest r("a", Shape(64), Deadline::At(start, start + milliseconds(10)));
  bool listened = false;
  r.SetCancelListener([&] { listened = true; });
  EXPECT_FALSE(r.CancelIfExpired(start + milliseconds(5)));
  EXPECT_FALSE(r.done());
  EXPECT_TRUE(r.CancelIfExpired(start + milliseconds(250)));
  EXPECT_TRUE(listened);
  EXPECT_EQ(r.status(), Deadline::At(start, start).ExceededError(start + milliseconds(250)));
}

TEST(PendingRequest, AListenerSetAfterTheCancelRunsAtOnce) {
  PendingRequest r("a", Shape(64), Deadline());
  r.Cancel();
  bool listened = false;
  r.SetCancelListener([&] { listened = true; });
  EXPECT_TRUE(listened);
}

TEST(AdmissionQueue, ExpiredQueuedRequestsGetTheDeadlineWording) {
  AdmissionQueue q(4);
  const Clock::time_point start = Clock::now();
  auto expired = std::make_shared<PendingRequest>("x", Shape(64),
                                                  Deadline::At(start, start + milliseconds(1)));
  auto live = std::make_shared<PendingRequest>("y", Shape(64), Deadline());
  ASSERT_TRUE(q.Push(expired).ok());
  ASSERT_TRUE(q.Push(live).ok());
  std::this_thread::sleep_for(milliseconds(5));
  absl::Status dropped;
  q.SetDropObserver([&](const PendingRequest&, const absl::Status& s) { dropped = s; });
  auto batch = q.PopBatch(4);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->id(), "y");
  EXPECT_EQ(dropped.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(expired->status(), dropped);
  EXPECT_EQ(dropped.message().rfind("deadline exceeded after ", 0), 0u) << dropped;
}

TEST(AdmissionQueue, PopBatchWakesOnPushWithoutPolling) {
  AdmissionQueue q(4);
  std::thread pusher([&] {
    std::this_thread::sleep_for(milliseconds(30));
    ASSERT_TRUE(q.Push(std::make_shared<PendingRequest>("a", Shape(64), Deadline())).ok());
  });
  auto batch = q.PopBatch(1);
  pusher.join();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->id(), "a");
}

TEST(Wakeup, NotifyWakesTheWaiterWhenItsConditionHolds) {
  Wakeup w;
  std::atomic<bool> flag{false};
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    flag.store(true);
    w.Notify();
  });
  const auto start = Clock::now();
  EXPECT_TRUE(w.WaitUntil(Clock::time_point::max(), [&] { return flag.load(); }));
  t.join();
  EXPECT_LT(Clock::now() - start, seconds(10));
}

TEST(Wakeup, WaitUntilReturnsFalseAtTheDeadline) {
  Wakeup w;
  const auto start = Clock::now();
  EXPECT_FALSE(w.WaitUntil(start + milliseconds(30), [] { return false; }));
  EXPECT_GE(Clock::now() - start, milliseconds(30));
}

}  // namespace
}  // namespace ditserve::server
