// Where a model's building blocks get their weights and linear layers from. The model builds every
// block through a ModuleLoader; which tensor-parallel style each linear layer gets is the loader's
// business (the plan in the ShardedStateDict), not the model's.
//
// Implementations: ReplicatedModuleLoader (below; refuses sharded plans) and
// tp::ParallelModuleLoader (models/tp/parallel_module_loader.h). Ownership: a loader borrows its
// state dict (and communicator); layers it returns own their tensors (shared with the state dict)
// and may keep the communicator pointer, which must outlive them.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"
#include "sharding/state_dict.h"

namespace ditserve::models {

class ModuleLoader {
 public:
  virtual ~ModuleLoader() = default;

  virtual const sharding::ShardedStateDict& state_dict() const = 0;
  // The linear layer at module path `path` ("<path>.weight", optional "<path>.bias").
  virtual absl::StatusOr<std::unique_ptr<LinearLayer>> LoadLinear(const std::string& path) const = 0;

  // A tensor by full name, NOT_FOUND naming it when absent.
  absl::StatusOr<torch::Tensor> Tensor(const std::string& name) const {
    return state_dict().Get(name);
  }
};

// Every linear layer replicated (tp = 1). FAILED_PRECONDITION for a module the plan shards.
class ReplicatedModuleLoader : public ModuleLoader {
 public:
  explicit ReplicatedModuleLoader(const sharding::ShardedStateDict& sd) : sd_(sd) {}
  const sharding::ShardedStateDict& state_dict() const override { return sd_; }
  absl::StatusOr<std::unique_ptr<LinearLayer>> LoadLinear(const std::string& path) const override;

 private:
  const sharding::ShardedStateDict& sd_;
};

// "a.b" + "c" -> "a.b.c"; an empty prefix gives `name`.
inline std::string JoinPath(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace ditserve::models
