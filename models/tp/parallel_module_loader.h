// The tensor-parallel ModuleLoader: each linear layer gets the class its planned style calls for
// (ShardedStateDict::ShardingOf(path)):
//   replicated                      → models::Linear
//   colwise, packed colwise         → ColumnParallelLinear
//   rowwise, packed rowwise,
//   rowwise_split_input             → RowParallelLinear (one all-reduce per call)
// so model code stays free of style decisions. With world size 1 and a replicated plan it builds
// exactly what ReplicatedModuleLoader builds.
//
// Ownership: borrows the state dict and the communicator; both must outlive the loader, and the
// communicator must outlive every layer built. Thread-safety: const, safe to share.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"
#include "comm/communicator.h"

namespace ditserve::models::tp {

class ParallelModuleLoader : public ModuleLoader {
 public:
  ParallelModuleLoader(const sharding::ShardedStateDict& sd, comm::Communicator* comm)
      : sd_(sd), comm_(comm) {}
  const sharding::ShardedStateDict& state_dict() const override { return sd_; }
  absl::StatusOr<std::unique_ptr<LinearLayer>> LoadLinear(const std::string& path) const override;

 private:
  const sharding::ShardedStateDict& sd_;
  comm::Communicator* comm_;
};

}  // namespace ditserve::models::tp
