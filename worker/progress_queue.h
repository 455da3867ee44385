// ProgressQueue: the bounded hand-over of one call's progress events from the engine thread (the
// producer, which owns the device and must never wait on a client) to the RPC handler thread (the
// consumer, which writes them to the client's stream at whatever pace the client reads).
//
// Contract:
// - Producer = the engine thread (Push, Close); consumer = the handler thread of the call (Pop,
//   Drain). One producer and one consumer per queue; a queue serves one call.
// - Push never blocks on the consumer: it holds the lock only to append. When `capacity` events are
//   already waiting, the oldest waiting one is dropped, so a stalled reader loses intermediate
//   progress but always finds the latest events, in order.
// - Close() is the job's end (the producer calls it exactly once, last, also when the job failed or
//   never ran); the events pushed before it stay poppable. The job's terminal event (its result or
//   error) is not a queued event: the consumer takes it from the job's future once Pop reports the
//   queue closed and empty, so it can never be dropped.
// - Ownership: the consumer owns the queue (on its stack) and keeps it alive until the producer has
//   closed it (Drain returns only then).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace ditserve::worker {

template <typename T>
class ProgressQueue {
 public:
  // At most `capacity` (>= 1) events wait at a time.
  explicit ProgressQueue(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  ProgressQueue(const ProgressQueue&) = delete;
  ProgressQueue& operator=(const ProgressQueue&) = delete;

  // Producer. Appends `event`, dropping the oldest waiting event when full. Ignored after Close.
  void Push(T event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      if (events_.size() >= capacity_) {
        events_.pop_front();
        ++dropped_;
      }
      events_.push_back(std::move(event));
    }
    cv_.notify_one();
  }

  // Producer: no more events. Notifies under the lock: once the consumer sees the queue closed it
  // may destroy it (Drain returned), so Close must not touch it after releasing the lock.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_one();
  }

  // Consumer. The next event, waiting for one; nullopt once the queue is closed and empty.
  std::optional<T> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return closed_ || !events_.empty(); });
    if (events_.empty()) return std::nullopt;
    T event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

  // Consumer: pops every event until the queue is closed, handing each to `write` (outside the
  // lock). Once `write` returns false (the client went away) the remaining events are popped and
  // discarded, so the queue still ends closed. Returns whether every write succeeded.
  template <typename Write>
  bool Drain(Write&& write) {
    bool open = true;
    while (std::optional<T> event = Pop()) {
      if (open) open = write(*event);
    }
    return open;
  }

  // Events dropped so far because the consumer lagged `capacity` behind.
  uint64_t dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> events_;
  bool closed_ = false;
  uint64_t dropped_ = 0;
};

}  // namespace ditserve::worker
