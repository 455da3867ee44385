// Fetching a named weight from a state dict with its expected shape checked up front, so a wrong
// or truncated checkpoint fails at construction with the tensor's name instead of deep inside a
// forward pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "sharding/state_dict.h"

namespace ditserve::vae {

// The tensor `name`, or NOT_FOUND naming it, or INVALID_ARGUMENT naming it and both shapes.
absl::StatusOr<torch::Tensor> CheckedWeight(const sharding::ShardedStateDict& state,
                                            const std::string& name,
                                            const std::vector<int64_t>& shape);

}  // namespace ditserve::vae
