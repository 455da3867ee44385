// ShardedStateDict: the LibTorch side of the loader. It holds this rank's slice of every tensor of
// one model component, already on the target device in the target dtype, together with the
// tensor-parallel style of every planned module. Models are built from it; they never see files.
//
// Ownership: owns its tensors. Thread-safety: immutable after construction, safe to share.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "sharding/tp_style.h"

namespace ditserve::sharding {

struct ModuleSharding {
  TpStyle style = TpStyle::kReplicated;
  // Packed styles: the size of each block on this rank (sum = local size of the sliced dim).
  std::vector<int64_t> local_blocks;
};

class ShardedStateDict {
 public:
  ShardedStateDict() = default;
  ShardedStateDict(int rank, int world_size, std::map<std::string, torch::Tensor> tensors,
                   std::map<std::string, ModuleSharding> modules);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  bool Contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // This rank's tensor, or NOT_FOUND naming the tensor.
  absl::StatusOr<torch::Tensor> Get(const std::string& name) const;
  // Get, and INVALID_ARGUMENT naming the tensor and both shapes unless it has exactly `shape`: a
  // wrong or truncated checkpoint fails at construction, not deep inside a forward pass.
  absl::StatusOr<torch::Tensor> GetWithShape(const std::string& name,
                                             const std::vector<int64_t>& shape) const;
  // Sharding of a module path ("transformer_blocks.0.attn.to_q"); kReplicated when unplanned.
  ModuleSharding ShardingOf(const std::string& module_path) const;

  std::vector<std::string> Names() const;
  // Bytes held by this rank's tensors.
  uint64_t TotalBytes() const;
  const std::map<std::string, torch::Tensor>& tensors() const { return tensors_; }
  // Every planned module's sharding, by module path (unplanned modules are absent).
  const std::map<std::string, ModuleSharding>& modules() const { return modules_; }

 private:
  int rank_ = 0;
  int world_size_ = 1;
  std::map<std::string, torch::Tensor> tensors_;
  std::map<std::string, ModuleSharding> modules_;
};

}  // namespace ditserve::sharding
