// Deadline: the one place where a request's time budget is decided and where running out of it is
// worded. The RPC edge maps the client's deadline (gRPC's system-clock time point) plus the
// --default-timeout to a steady-clock time point once, at admission; the admission queue, the
// dispatcher and the RPC edge all ask this object whether it has passed and take the
// DEADLINE_EXCEEDED status from it, so a client sees the same wording wherever its request
// expired.
//
// A plain value type: copyable, immutable, thread-safe to read.
#pragma once

#include <chrono>

#include "absl/status/status.h"

namespace ditserve::server {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  // A deadline that never passes (start = now).
  Deadline();

  // The deadline of a request that arrived at `steady_now` / `system_now` (the same instant on
  // both clocks): the client's deadline (`client`, as grpc::ServerContext::deadline() reports it;
  // gRPC's "no deadline" is its far-future time point) or `default_timeout` after arrival,
  // whichever comes first. A client deadline already in the past maps to `steady_now`.
  static Deadline ForClient(std::chrono::system_clock::time_point client,
                            std::chrono::duration<double> default_timeout,
                            Clock::time_point steady_now,
                            std::chrono::system_clock::time_point system_now);
  // Same, at the current time.
  static Deadline ForClient(std::chrono::system_clock::time_point client,
                            std::chrono::duration<double> default_timeout);
  // A budget that started at `start` and ends at `when`.
  static Deadline At(Clock::time_point start, Clock::time_point when);

  Clock::time_point start() const { return start_; }
  Clock::time_point when() const { return when_; }
  bool expired(Clock::time_point now = Clock::now()) const { return now >= when_; }

  // DEADLINE_EXCEEDED, "deadline exceeded after S s" (S: time since the budget started, at
  // `now`). The only wording of an expired request.
  absl::Status ExceededError(Clock::time_point now = Clock::now()) const;

 private:
  Deadline(Clock::time_point start, Clock::time_point when) : start_(start), when_(when) {}
  Clock::time_point start_;
  Clock::time_point when_;
};

}  // namespace ditserve::server
