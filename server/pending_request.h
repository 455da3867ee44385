// PendingRequest: one client request between admission and its answer. The RPC handler thread
// creates it, waits on it and reads its events; the dispatcher thread feeds it progress and the
// final result. Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "ditserve/v1/ditserve.pb.h"
#include "server/request_validator.h"

namespace ditserve::server {

using Clock = std::chrono::steady_clock;

class PendingRequest {
 public:
  PendingRequest(std::string id, ValidatedRequest request, Clock::time_point deadline);

  const std::string& id() const { return id_; }
  const ValidatedRequest& request() const { return request_; }
  Clock::time_point enqueued_at() const { return enqueued_at_; }
  Clock::time_point deadline() const { return deadline_; }

  // Producer side (dispatcher).
  void MarkStarted();  // left the queue
  void PushEvent(v1::GenerateEvent event);
  // Completes the request exactly once; later calls are ignored.
  void Finish(absl::Status status, v1::GenerateResponse response = {});

  // Consumer side (RPC handler). Waits until an event is available, the request is done, or
  // `until`. Returns the next event if any.
  std::optional<v1::GenerateEvent> WaitForEvent(Clock::time_point until);
  bool done() const;
  absl::Status status() const;
  v1::GenerateResponse TakeResponse();

  // Cancellation requested by the client (or the deadline). The dispatcher polls it.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load() || Clock::now() >= deadline_; }
  bool started() const;
  std::optional<Clock::time_point> started_at() const;

 private:
  const std::string id_;
  const ValidatedRequest request_;
  const Clock::time_point enqueued_at_;
  const Clock::time_point deadline_;
  std::atomic<bool> cancelled_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::GenerateEvent> events_;
  std::optional<Clock::time_point> started_at_;
  bool done_ = false;
  absl::Status status_;
  v1::GenerateResponse response_;
};

}  // namespace ditserve::server
