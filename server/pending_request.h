// PendingRequest: one client request between admission and its answer. The RPC handler thread
// creates it, waits on it and reads its events; the dispatcher thread feeds it progress and the
// final result. Thread-safe: every method may be called from any thread.
//
// Cancellation ends the request at once: Cancel(why) finishes it with `why` (the client's
// CANCELLED, the Deadline's DEADLINE_EXCEEDED, the drain's UNAVAILABLE), wakes its waiter and
// calls the cancel listener, so whoever holds the request (the dispatcher, while its job runs)
// learns of it without polling. A result that arrives later is dropped (Finish runs once).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "ditserve/v1/ditserve.pb.h"
#include "server/deadline.h"
#include "server/request_validator.h"

namespace ditserve::server {

class PendingRequest {
 public:
  PendingRequest(std::string id, ValidatedRequest request, Deadline deadline);
  // A deadline at `deadline`, counted from now.
  PendingRequest(std::string id, ValidatedRequest request, Clock::time_point deadline);

  const std::string& id() const { return id_; }
  const ValidatedRequest& request() const { return request_; }
  Clock::time_point enqueued_at() const { return enqueued_at_; }
  const Deadline& deadline() const { return deadline_; }

  // Producer side (dispatcher).
  void MarkStarted();  // left the queue
  void PushEvent(v1::GenerateEvent event);
  // Completes the request exactly once; later calls are ignored.
  void Finish(absl::Status status, v1::GenerateResponse response = {});

  // Consumer side (RPC handler). Waits until an event is available, the request is done, or
  // `until`. Returns the next event if any (none once the request was cancelled).
  std::optional<v1::GenerateEvent> WaitForEvent(Clock::time_point until);
  bool done() const;
  absl::Status status() const;
  v1::GenerateResponse TakeResponse();

  // Cancels and finishes the request with `why` (first call wins; ignored once finished), then
  // calls the cancel listener.
  void Cancel(absl::Status why = absl::CancelledError("cancelled by the client"));
  // If the deadline has passed, cancels with the Deadline's DEADLINE_EXCEEDED. Returns whether
  // the request is cancelled now (by this call or earlier).
  bool CancelIfExpired(Clock::time_point now = Clock::now());
  // Cancel() was called, or the deadline has passed (not yet acted upon, maybe).
  bool cancelled() const { return cancelled_.load() || deadline_.expired(); }
  // Called once, on the cancelling thread and outside every lock of this request, after Cancel()
  // took effect; called at once when the request is already cancelled. One listener at a time;
  // pass {} to remove it (returns after any call in progress has ended). The listener must not
  // call SetCancelListener itself.
  void SetCancelListener(std::function<void()> listener);

  // MarkStarted was called: the request left the queue.
  bool started() const;

 private:
  const std::string id_;
  const ValidatedRequest request_;
  const Clock::time_point enqueued_at_;
  const Deadline deadline_;
  std::atomic<bool> cancelled_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::GenerateEvent> events_;
  bool started_ = false;
  bool done_ = false;
  absl::Status status_;
  v1::GenerateResponse response_;

  std::mutex listener_mu_;  // held while the listener runs, so removing it waits for the call
  std::function<void()> cancel_listener_;
};

}  // namespace ditserve::server
