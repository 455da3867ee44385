// AdmissionQueue: the bounded FIFO between the RPC handlers and the dispatcher.
// Push is called by RPC handler threads, PopBatch by the single dispatcher thread. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "server/pending_request.h"

namespace ditserve::server {

class AdmissionQueue {
 public:
  using DropObserver = std::function<void(const PendingRequest&, const absl::Status&)>;

  explicit AdmissionQueue(size_t capacity);

  // Called (outside the lock, on whichever thread dropped it) for every request that leaves the
  // queue without running. Set once, before the first Push.
  void SetDropObserver(DropObserver on_dropped) { on_dropped_ = std::move(on_dropped); }

  // Drops dead requests first, so cancelled ones never hold a slot; then RESOURCE_EXHAUSTED
  // (naming the queue length) when full; UNAVAILABLE once closed.
  absl::Status Push(std::shared_ptr<PendingRequest> request);
  // Admits all of `requests` or none (the rules of Push, with room needed for every one): the
  // images of one call (the HTTP API's `n`). They are queued next to each other under one lock, so
  // when they share a batchable() shape PopBatch(max_batch >= their count) takes them as one batch.
  absl::Status PushAll(std::vector<std::shared_ptr<PendingRequest>> requests);

  // Blocks until a live request is queued or the queue is closed (then returns empty). Requests
  // cancelled or past their deadline while queued are finished with their cancel reason / the
  // Deadline's DEADLINE_EXCEEDED and reported to the drop observer, never run. It waits only while
  // the queue is empty, and wakes on Push / Close only (no timer). Returns the oldest live
  // request plus up to max_batch - 1 later requests of the same shape, in arrival order; a
  // request whose shape is not batchable() (it has input images, or the step cache on) is returned
  // alone.
  std::vector<std::shared_ptr<PendingRequest>> PopBatch(size_t max_batch);

  // Zero-based position of a queued request (0 = next), or -1 when not queued.
  int Position(const PendingRequest& request) const;
  size_t size() const;
  size_t capacity() const { return capacity_; }

  // Stops admission, wakes the dispatcher, and finishes every queued request with `status`.
  void Close(const absl::Status& status);
  // Removes cancelled / expired requests now (their slots are free at once) and wakes PopBatch.
  // Called by an RPC handler right after it cancels its request.
  void DropCancelled();

 private:
  using Dropped = std::vector<std::pair<std::shared_ptr<PendingRequest>, absl::Status>>;
  void TakeDeadLocked(Dropped* dropped);  // requires mu_
  void FinishDropped(Dropped* dropped);   // without mu_

  DropObserver on_dropped_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PendingRequest>> queue_;
  bool closed_ = false;
};

}  // namespace ditserve::server
