// The admission queue: bounded, FIFO, same-shape batching, dead requests never run.
#include <gtest/gtest.h>

#include <thread>

#include "server/admission_queue.h"

namespace ditserve::server {
namespace {

std::shared_ptr<PendingRequest> Make(const std::string& id, uint32_t height,
                                     std::chrono::milliseconds ttl = std::chrono::seconds(60)) {
  ValidatedRequest v;
  v.shape.height = height;
  v.shape.width = 64;
  v.shape.steps = 4;
  return std::make_shared<PendingRequest>(id, v, Clock::now() + ttl);
}

TEST(AdmissionQueue, RejectsWhenFullNamingTheLength) {
  AdmissionQueue q(2);
  ASSERT_TRUE(q.Push(Make("a", 64)).ok());
  ASSERT_TRUE(q.Push(Make("b", 64)).ok());
  absl::Status s = q.Push(Make("c", 64));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("queue length 2"), std::string::npos) << s;
}

TEST(AdmissionQueue, BatchesSameShapeInArrivalOrder) {
  AdmissionQueue q(8);
  auto a = Make("a", 64), b = Make("b", 128), c = Make("c", 64), d = Make("d", 64);
  for (auto& r : {a, b, c, d}) ASSERT_TRUE(q.Push(r).ok());
  EXPECT_EQ(q.Position(*c), 2);
  auto first = q.PopBatch(2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]->id(), "a");
  EXPECT_EQ(first[1]->id(), "c");
  EXPECT_TRUE(first[0]->started());
  auto second = q.PopBatch(2);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]->id(), "b");
  auto third = q.PopBatch(2);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0]->id(), "d");
}

TEST(AdmissionQueue, DropsCancelledAndExpiredRequests) {
  AdmissionQueue q(8);
  auto cancelled = Make("x", 64);
  auto expired = Make("y", 64, std::chrono::milliseconds(1));
  auto live = Make("z", 64);
  for (auto& r : {cancelled, expired, live}) ASSERT_TRUE(q.Push(r).ok());
  cancelled->Cancel();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int dropped = 0;
  q.SetDropObserver([&](const PendingRequest&, const absl::Status&) { ++dropped; });
  auto batch = q.PopBatch(4);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->id(), "z");
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(cancelled->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(expired->status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(AdmissionQueue, CancelledRequestsFreeTheirSlotsWithoutADispatcher) {
  AdmissionQueue q(2);
  int dropped = 0;
  q.SetDropObserver([&](const PendingRequest&, const absl::Status&) { ++dropped; });
  auto a = Make("a", 64), b = Make("b", 64);
  ASSERT_TRUE(q.Push(a).ok());
  ASSERT_TRUE(q.Push(b).ok());
  a->Cancel();
  q.DropCancelled();  // what the RPC handler does right after it cancels
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(a->status().code(), absl::StatusCode::kCancelled);
  b->Cancel();  // no DropCancelled: Push itself makes room
  EXPECT_TRUE(q.Push(Make("c", 64)).ok());
  EXPECT_TRUE(q.Push(Make("d", 64)).ok());
  EXPECT_EQ(q.Push(Make("e", 64)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(dropped, 2);
}

TEST(AdmissionQueue, CloseFinishesWaitersAndUnblocksPop) {
  AdmissionQueue q(4);
  auto a = Make("a", 64);
  ASSERT_TRUE(q.Push(a).ok());
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    q.Close(absl::UnavailableError("bye"));
  });
  auto batch = q.PopBatch(1);
  EXPECT_EQ(batch.size(), 1u);
  auto empty = q.PopBatch(1);  // blocks until closed
  EXPECT_TRUE(empty.empty());
  closer.join();
  EXPECT_EQ(q.Push(Make("b", 64)).code(), absl::StatusCode::kUnavailable);
}

TEST(PendingRequest, DeliversEventsThenFinishesOnce) {
  auto r = Make("a", 64);
  v1::GenerateEvent e;
  e.mutable_progress()->set_step(1);
  r->PushEvent(e);
  auto got = r->WaitForEvent(Clock::now() + std::chrono::milliseconds(10));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->progress().step(), 1u);
  r->Finish(absl::OkStatus());
  r->Finish(absl::InternalError("late"));
  EXPECT_TRUE(r->status().ok());
  EXPECT_FALSE(r->WaitForEvent(Clock::now() + std::chrono::milliseconds(10)).has_value());
}

}  // namespace
}  // namespace ditserve::server
