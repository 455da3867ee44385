#include "sharding/state_dict.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ditserve::sharding {

ShardedStateDict::ShardedStateDict(int rank, int world_size,
                                   std::map<std::string, torch::Tensor> tensors,
                                   std::map<std::string, ModuleSharding> modules)
    : rank_(rank),
      world_size_(world_size),
      tensors_(std::move(tensors)),
      modules_(std::move(modules)) {}

absl::StatusOr<torch::Tensor> ShardedStateDict::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("checkpoint has no tensor named '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<torch::Tensor> ShardedStateDict::GetWithShape(const std::string& name,
                                                             const std::vector<int64_t>& shape) const {
  ASSIGN_OR_RETURN(torch::Tensor t, Get(name));
  const auto sizes = t.sizes().vec();
  if (sizes != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(sizes, ", "), "], expected [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  return t;
}

ModuleSharding ShardedStateDict::ShardingOf(const std::string& module_path) const {
  auto it = modules_.find(module_path);
  return it == modules_.end() ? ModuleSharding{} : it->second;
}

std::vector<std::string> ShardedStateDict::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

uint64_t ShardedStateDict::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& [name, t] : tensors_) total += t.numel() * t.element_size();
  return total;
}

}  // namespace ditserve::sharding
