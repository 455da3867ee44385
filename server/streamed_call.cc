#include "server/streamed_call.h"

#include <utility>

namespace ditserve::server {

StreamedCall::StreamedCall(Serve serve)
    : result_(absl::InternalError("the call has not ended")),
      thread_([this, serve = std::move(serve)] {
        Responses r = serve([this](const v1::GenerateEvent& e) { return Push(e); });
        std::lock_guard<std::mutex> lock(mu_);
        result_ = std::move(r);
        ended_ = true;
        cv_.notify_all();
      }) {}

StreamedCall::~StreamedCall() {
  ClientGone();
  thread_.join();
}

bool StreamedCall::Push(const v1::GenerateEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (client_gone_) return false;
  events_.push_back(event);
  cv_.notify_all();
  return true;
}

bool StreamedCall::WaitStarted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return ended_ || !events_.empty(); });
  return !events_.empty();
}

std::optional<v1::GenerateEvent> StreamedCall::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return ended_ || !events_.empty(); });
  if (events_.empty()) return std::nullopt;
  v1::GenerateEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void StreamedCall::ClientGone() {
  std::lock_guard<std::mutex> lock(mu_);
  client_gone_ = true;
}

}  // namespace ditserve::server
