// In-process communicators: a single-rank one (tp = 1, every collective is the identity) and a
// group of threads sharing memory, which behaves exactly like a real group of `world_size` ranks
// (same call-order contract, same results) so tensor parallelism is unit-testable in one process.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace ditserve::comm {

// A communicator for a group of one. Thread-compatible.
std::unique_ptr<Communicator> MakeSingleRankCommunicator();

// Starts `world_size` threads, gives each its own Communicator of one shared in-process group and
// runs fn on it; returns the first non-OK status in time order (the root cause, not the ranks it
// broke) or OK. A rank that stays alive but skips a collective the others are in makes them fail
// with UNAVAILABLE after `timeout_ms` instead of hanging; a rank whose fn has returned makes them
// fail at once. Ranks that call different collectives (or pass mismatched shapes) all get an error.
// Sums run in rank order, so every rank receives bit-identical results. timeout_ms <= 0: no timeout.
absl::Status RunLocalGroup(int world_size, const std::function<absl::Status(Communicator&)>& fn,
                           int timeout_ms = 60000);

}  // namespace ditserve::comm
