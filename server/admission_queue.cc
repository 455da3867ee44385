#include "server/admission_queue.h"

#include "absl/strings/str_cat.h"

namespace ditserve::server {

AdmissionQueue::AdmissionQueue(size_t capacity) : capacity_(capacity) {}

void AdmissionQueue::TakeDeadLocked(Dropped* dropped) {
  const Clock::time_point now = Clock::now();
  for (auto it = queue_.begin(); it != queue_.end();) {
    // An expired request is cancelled here with the Deadline's status; a cancelled one already
    // carries its reason (Cancel finished it).
    if ((*it)->CancelIfExpired(now)) {
      dropped->emplace_back(*it, (*it)->status());
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void AdmissionQueue::FinishDropped(Dropped* dropped) {
  for (auto& [request, why] : *dropped) {
    request->Finish(why);  // no-op unless Close() dropped it
    if (on_dropped_) on_dropped_(*request, why);
  }
  dropped->clear();
}

absl::Status AdmissionQueue::Push(std::shared_ptr<PendingRequest> request) {
  std::vector<std::shared_ptr<PendingRequest>> one;
  one.push_back(std::move(request));
  return PushAll(std::move(one));
}

absl::Status AdmissionQueue::PushAll(std::vector<std::shared_ptr<PendingRequest>> requests) {
  Dropped dropped;
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TakeDeadLocked(&dropped);
    if (closed_) {
      status = absl::UnavailableError("server is shutting down");
    } else if (queue_.size() + requests.size() > capacity_) {
      status = absl::ResourceExhaustedError(
          requests.size() == 1
              ? absl::StrCat("admission queue is full: ", queue_.size(),
                             " requests waiting (queue length ", capacity_, "); retry later")
              : absl::StrCat("admission queue is full: ", queue_.size(),
                             " requests waiting (queue length ", capacity_, "), no room for ",
                             requests.size(), " more; retry later"));
    } else {
      for (auto& r : requests) queue_.push_back(std::move(r));
    }
  }
  FinishDropped(&dropped);
  if (status.ok()) cv_.notify_all();
  return status;
}

std::vector<std::shared_ptr<PendingRequest>> AdmissionQueue::PopBatch(size_t max_batch) {
  std::vector<std::shared_ptr<PendingRequest>> batch;
  Dropped dropped;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (batch.empty()) {
      // Drop dead requests wherever they are in the queue.
      TakeDeadLocked(&dropped);
      if (!queue_.empty()) {
        batch.push_back(queue_.front());
        queue_.pop_front();
        const RequestShape shape = batch.front()->request().shape;
        // A request with input images or the step cache on runs alone (RequestShape::batchable);
        // the shape comparison keeps it out of other requests' batches.
        const size_t limit = shape.batchable() ? max_batch : 1;
        for (auto it = queue_.begin(); it != queue_.end() && batch.size() < limit;) {
          if ((*it)->request().shape == shape) {
            batch.push_back(*it);
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
        break;
      }
      if (closed_) break;
      // Only an empty queue waits, so no deadline needs noticing here (a queued request's
      // deadline is watched by its RPC handler, which cancels it and calls DropCancelled).
      cv_.wait(lock);
    }
  }
  FinishDropped(&dropped);
  for (auto& r : batch) r->MarkStarted();
  return batch;
}

int AdmissionQueue::Position(const PendingRequest& request) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i].get() == &request) return static_cast<int>(i);
  }
  return -1;
}

size_t AdmissionQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void AdmissionQueue::Close(const absl::Status& status) {
  std::deque<std::shared_ptr<PendingRequest>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  Dropped dropped;
  for (auto& r : left) dropped.emplace_back(r, status);
  FinishDropped(&dropped);
}

void AdmissionQueue::DropCancelled() {
  Dropped dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TakeDeadLocked(&dropped);
  }
  FinishDropped(&dropped);
  cv_.notify_all();
}

}  // namespace ditserve::server
