#include "models/vae/checked_weight.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<torch::Tensor> CheckedWeight(const sharding::ShardedStateDict& state,
                                            const std::string& name,
                                            const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(torch::Tensor t, state.Get(name));
  const auto sizes = t.sizes().vec();
  if (sizes != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(sizes, ", "), "], expected [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  return t;
}

}  // namespace ditserve::vae
