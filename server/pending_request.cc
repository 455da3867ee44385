#include "server/pending_request.h"

namespace ditserve::server {

PendingRequest::PendingRequest(std::string id, ValidatedRequest request, Deadline deadline)
    : id_(std::move(id)),
      request_(std::move(request)),
      enqueued_at_(Clock::now()),
      deadline_(deadline) {}

PendingRequest::PendingRequest(std::string id, ValidatedRequest request,
                               Clock::time_point deadline)
    : PendingRequest(std::move(id), std::move(request), Deadline::At(Clock::now(), deadline)) {}

void PendingRequest::MarkStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
}

bool PendingRequest::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

void PendingRequest::PushEvent(v1::GenerateEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

void PendingRequest::Finish(absl::Status status, v1::GenerateResponse response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
    response_ = std::move(response);
  }
  cv_.notify_all();
}

void PendingRequest::Cancel(absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_.load()) return;
    cancelled_.store(true);
    events_.clear();
    if (!done_) {
      done_ = true;
      status_ = std::move(why);
    }
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(listener_mu_);
  if (cancel_listener_) cancel_listener_();
}

bool PendingRequest::CancelIfExpired(Clock::time_point now) {
  if (!cancelled_.load() && deadline_.expired(now)) Cancel(deadline_.ExceededError(now));
  return cancelled_.load();
}

void PendingRequest::SetCancelListener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  cancel_listener_ = std::move(listener);
  if (cancel_listener_ && cancelled_.load()) cancel_listener_();
}

std::optional<v1::GenerateEvent> PendingRequest::WaitForEvent(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, until, [&] { return !events_.empty() || done_; });
  if (events_.empty()) return std::nullopt;
  v1::GenerateEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool PendingRequest::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::Status PendingRequest::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

v1::GenerateResponse PendingRequest::TakeResponse() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(response_);
}

}  // namespace ditserve::server
