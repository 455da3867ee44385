#include "server/deadline.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ditserve::server {
namespace {

// gRPC reports "no deadline" as its infinite future, which system_clock shows as (close to) the
// largest time point; anything more than a year ahead counts as none.
bool IsNoDeadline(std::chrono::system_clock::time_point client,
                  std::chrono::system_clock::time_point system_now) {
  return client >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 366) ||
         client - system_now > std::chrono::hours(24 * 365);
}

}  // namespace

Deadline::Deadline() : start_(Clock::now()), when_(Clock::time_point::max()) {}

Deadline Deadline::ForClient(std::chrono::system_clock::time_point client,
                             std::chrono::duration<double> default_timeout,
                             Clock::time_point steady_now,
                             std::chrono::system_clock::time_point system_now) {
  Clock::time_point when = Clock::time_point::max();
  if (default_timeout.count() > 0) {
    // Clamp before converting, so an absurd default cannot overflow the steady clock.
    const auto capped = std::min(default_timeout, std::chrono::duration<double>(
                                                      std::chrono::hours(24 * 365 * 100)));
    when = steady_now + std::chrono::duration_cast<Clock::duration>(capped);
  }
  if (!IsNoDeadline(client, system_now)) {
    const auto left = std::max(client - system_now, std::chrono::system_clock::duration::zero());
    when = std::min(when, steady_now + std::chrono::duration_cast<Clock::duration>(left));
  }
  return Deadline(steady_now, when);
}

Deadline Deadline::ForClient(std::chrono::system_clock::time_point client,
                             std::chrono::duration<double> default_timeout) {
  return ForClient(client, default_timeout, Clock::now(), std::chrono::system_clock::now());
}

Deadline Deadline::At(Clock::time_point start, Clock::time_point when) {
  return Deadline(start, when);
}

absl::Status Deadline::ExceededError(Clock::time_point now) const {
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  return absl::DeadlineExceededError(
      absl::StrFormat("deadline exceeded after %.3f s", std::max(0.0, elapsed)));
}

}  // namespace ditserve::server
