// worker/progress_queue.h: events come out in order; a full queue drops the oldest waiting events
// and keeps the latest; Close ends the stream after what was queued; the producer never waits for
// a consumer stuck in its write; Drain keeps draining after a failed write.
#include "worker/progress_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <thread>
#include <vector>

namespace ditserve::worker {
namespace {

std::vector<int> DrainAll(ProgressQueue<int>& queue) {
  std::vector<int> out;
  queue.Drain([&](int v) {
    out.push_back(v);
    return true;
  });
  return out;
}

TEST(ProgressQueue, DeliversInOrderThenEndsAtClose) {
  ProgressQueue<int> queue(8);
  for (int i = 1; i <= 5; ++i) queue.Push(i);
  queue.Close();
  queue.Push(6);  // after Close: ignored
  EXPECT_EQ(DrainAll(queue), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(queue.Pop(), std::nullopt);
  EXPECT_EQ(queue.dropped(), 0u);
}

TEST(ProgressQueue, AFullQueueDropsTheOldestAndKeepsTheLatest) {
  ProgressQueue<int> queue(3);
  for (int i = 1; i <= 10; ++i) queue.Push(i);
  queue.Close();
  EXPECT_EQ(DrainAll(queue), (std::vector<int>{8, 9, 10}));
  EXPECT_EQ(queue.dropped(), 7u);
}

TEST(ProgressQueue, PopWaitsForAnEventOrTheClose) {
  ProgressQueue<int> queue(2);
  std::promise<std::optional<int>> first;
  std::thread consumer([&] { first.set_value(queue.Pop()); });
  std::future<std::optional<int>> got = first.get_future();
  EXPECT_EQ(got.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  queue.Push(7);
  EXPECT_EQ(got.get(), 7);
  consumer.join();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.Close();
  });
  EXPECT_EQ(queue.Pop(), std::nullopt);
  closer.join();
}

// The consumer is stuck inside its first write (a client that never reads); the producer's pushes
// all return at once, and when the write returns the consumer finds the latest events.
TEST(ProgressQueue, TheProducerNeverWaitsForAStuckConsumer) {
  ProgressQueue<int> queue(4);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> in_write;
  std::vector<int> written;
  std::thread consumer([&] {
    queue.Drain([&](int v) {
      written.push_back(v);
      if (written.size() == 1) {
        in_write.set_value();
        released.wait();
      }
      return true;
    });
  });
  queue.Push(0);
  in_write.get_future().wait();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= 10000; ++i) queue.Push(i);
  queue.Close();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  release.set_value();
  consumer.join();
  EXPECT_EQ(written, (std::vector<int>{0, 9997, 9998, 9999, 10000}));
  EXPECT_EQ(queue.dropped(), 10000u - 4u);
}

// A failed write (the client went away) stops the writes, not the draining: the queue still ends.
TEST(ProgressQueue, DrainStopsWritingAfterAFailedWriteButDrainsToTheEnd) {
  ProgressQueue<int> queue(8);
  for (int i = 1; i <= 5; ++i) queue.Push(i);
  queue.Close();
  std::vector<int> written;
  const bool ok = queue.Drain([&](int v) {
    written.push_back(v);
    return v < 2;
  });
  EXPECT_FALSE(ok);
  EXPECT_EQ(written, (std::vector<int>{1, 2}));
  EXPECT_EQ(queue.Pop(), std::nullopt);
}

}  // namespace
}  // namespace ditserve::worker
