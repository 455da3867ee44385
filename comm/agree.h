// Collective decisions at step boundaries (cancellation, deadlines, errors).
//
// Contract: every rank of the group calls AgreeOnFlag at the same point (the step loop calls it
// at every step boundary, before starting the next step), so all ranks stop at the same step and
// none is left inside a collective alone. The communicator's usual rules apply (job thread only).
// A group of one answers on the host without touching the communicator or the device (so a step
// loop of one rank never waits for its device here).
#pragma once

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace ditserve::comm {

// Returns true on every rank iff at least one rank passed local_flag = true (an all-reduce max of
// a one-element int32 CPU tensor, or on the communicator's device when `device` says so).
absl::StatusOr<bool> AgreeOnFlag(Communicator& comm, bool local_flag,
                                 torch::Device device = torch::kCPU);

// The maximum of every rank's `local_value` (the same one-element all-reduce).
absl::StatusOr<int32_t> AgreeOnMax(Communicator& comm, int32_t local_value,
                                   torch::Device device = torch::kCPU);

// `root`'s `flag` on every rank (a one-element broadcast; the other ranks' flags are ignored): a
// decision one rank makes for the group, e.g. the step cache's (models/common/first_block_cache.h).
absl::StatusOr<bool> FlagOfRank(Communicator& comm, bool flag, int root,
                                torch::Device device = torch::kCPU);

}  // namespace ditserve::comm
