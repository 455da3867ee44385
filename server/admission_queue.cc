#include "server/admission_queue.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace ditserve::server {

AdmissionQueue::AdmissionQueue(size_t capacity) : capacity_(capacity) {}

void AdmissionQueue::TakeDeadLocked(Dropped* dropped) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled()) {
      absl::Status why = Clock::now() >= (*it)->deadline()
                             ? absl::DeadlineExceededError("deadline expired while queued")
                             : absl::CancelledError("cancelled while queued");
      dropped->emplace_back(*it, why);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void AdmissionQueue::FinishDropped(Dropped* dropped) {
  for (auto& [request, why] : *dropped) {
    request->Finish(why);
    if (on_dropped_) on_dropped_(*request, why);
  }
  dropped->clear();
}

absl::Status AdmissionQueue::Push(std::shared_ptr<PendingRequest> request) {
  Dropped dropped;
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TakeDeadLocked(&dropped);
    if (closed_) {
      status = absl::UnavailableError("server is shutting down");
    } else if (queue_.size() >= capacity_) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "admission queue is full: ", queue_.size(), " requests waiting (queue length ",
          capacity_, "); retry later"));
    } else {
      queue_.push_back(std::move(request));
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
        for (auto it = queue_.begin(); it != queue_.end() && batch.size() < max_batch;) {
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
      // Wake up periodically to expire deadlines of queued requests.
      cv_.wait_for(lock, std::chrono::milliseconds(100));
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
