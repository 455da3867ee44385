// StreamedCall: one generation call whose events a transport writes as they happen (the HTTP API's
// server-sent events), run on its own thread so the transport can still answer a refusal with an
// error status: the call is refused (validation, queue full, not ready) before its first event,
// and its first event (GenerateEvent.queued) comes once it is admitted.
//
// Contract: `serve` is ImageGenerationService::Serve bound to the call's requests; it gets an
// `emit` that queues each event and returns false once ClientGone() was called (Serve then cancels
// the request). One consumer thread calls WaitStarted, then Next until it returns nullopt, then
// result(). The destructor calls ClientGone() and joins the thread (which ends when Serve does:
// at the call's next event, its end or its deadline). Thread-safe as described; not copyable.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::server {

class StreamedCall {
 public:
  using Emit = std::function<bool(const v1::GenerateEvent&)>;
  using Responses = absl::StatusOr<std::vector<v1::GenerateResponse>>;
  using Serve = std::function<Responses(const Emit& emit)>;

  explicit StreamedCall(Serve serve);
  ~StreamedCall();
  StreamedCall(const StreamedCall&) = delete;
  StreamedCall& operator=(const StreamedCall&) = delete;

  // Waits for the first event or the end: true when events follow (the call was admitted), false
  // when the call ended first (result() then holds its refusal, or its answer).
  bool WaitStarted();
  // The next event, waiting for it; nullopt once the call has ended and every event was taken.
  std::optional<v1::GenerateEvent> Next();
  // The call's outcome; valid once Next returned nullopt or WaitStarted returned false.
  const Responses& result() const { return result_; }
  // The client went away: `emit` returns false from now on.
  void ClientGone();

 private:
  bool Push(const v1::GenerateEvent& event);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::GenerateEvent> events_;  // under mu_
  bool ended_ = false;                    // under mu_
  bool client_gone_ = false;              // under mu_
  Responses result_;                      // written by the thread before ended_
  std::thread thread_;
};

}  // namespace ditserve::server
