// Why the frontend is NOT_SERVING, as its public API says it (ModelInfo.not_serving_reason): the
// worker group's last formation error while the group is not formed (WorkerGroup::formation_failure).
//
// Thread-safety: as WorkerGroup's accessors (any thread).
#pragma once

#include <optional>

#include "ditserve/v1/ditserve.pb.h"
#include "server/worker_group.h"

namespace ditserve::server {

// The reason, or nullopt while the group is formed or no attempt has failed yet (still loading).
std::optional<v1::NotServingReason> NotServingReasonOf(const WorkerGroup& group);

}  // namespace ditserve::server
