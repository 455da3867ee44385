// The tensor-parallel ModuleLoader: each linear layer gets the class its planned style calls for
// (ShardedStateDict::ShardingOf(path)):
//   replicated                      → models::Linear
//   colwise, packed colwise         → ColumnParallelLinear
//   rowwise, packed rowwise,
//   rowwise_split_input             → RowParallelLinear (one all-reduce per call)
// so model code stays free of style decisions. With world size 1 and a replicated plan it builds
// exactly what ReplicatedModuleLoader builds.
//
// Every layer built is recorded in `registry` (when given) under its path, for LoRA targets.
// With `weights` kFp8, a layer IsFp8BlockLinear names is quantized to FP8 right after it is built
// from this rank's slice (LinearLayer::QuantizeToFp8; shapes the FP8 GEMM cannot take stay as
// they are).
//
// Ownership: borrows the state dict, the communicator and the registry; all must outlive the
// loader, and the communicator must outlive every layer built. Thread-safety: one thread builds.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/common/fp8_linear.h"
#include "models/common/linear_registry.h"
#include "models/common/module_loader.h"
#include "comm/communicator.h"

namespace ditserve::models::tp {

class ParallelModuleLoader : public ModuleLoader {
 public:
  ParallelModuleLoader(const sharding::ShardedStateDict& sd, comm::Communicator* comm,
                       LinearRegistry* registry = nullptr,
                       WeightFormat weights = WeightFormat::kModelDtype)
      : sd_(sd), comm_(comm), registry_(registry), weights_(weights) {}
  const sharding::ShardedStateDict& state_dict() const override { return sd_; }
  absl::StatusOr<std::unique_ptr<LinearLayer>> LoadLinear(const std::string& path) const override;

 private:
  const sharding::ShardedStateDict& sd_;
  absl::StatusOr<std::unique_ptr<LinearLayer>> Build(const std::string& path) const;
  comm::Communicator* comm_;
  LinearRegistry* registry_;
  WeightFormat weights_;
};

}  // namespace ditserve::models::tp
