// Which failures of a job leave a worker group usable: the one rule the worker (whether its
// communicator survives a failed job) and the frontend (whether a failed job means re-forming the
// group) both apply.
//
// The codes below are the ones every rank agrees on at a step boundary or before the denoising loop
// (pipeline/pipeline.h: cancellation, a request the pipeline refuses, no memory for the job), so no
// rank is left inside a collective. Any other code means a rank may be stranded mid-collective and
// the group must be re-formed.
#pragma once

#include "absl/status/status.h"

namespace ditserve {

inline bool GroupSurvives(absl::StatusCode code) {
  return code == absl::StatusCode::kOk || code == absl::StatusCode::kCancelled ||
         code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kResourceExhausted;
}

}  // namespace ditserve
