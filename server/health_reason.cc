#include "server/health_reason.h"

#include <string>

namespace ditserve::server {

std::optional<v1::NotServingReason> NotServingReasonOf(const WorkerGroup& group) {
  const std::optional<FormationFailure> failure = group.formation_failure();
  if (!failure || group.ready()) return std::nullopt;
  v1::NotServingReason reason;
  reason.set_code(absl::StatusCodeToString(failure->status.code()));
  reason.set_message(std::string(failure->status.message()));
  reason.set_permanent(failure->permanent);
  reason.set_attempts(failure->attempts);
  return reason;
}

}  // namespace ditserve::server
