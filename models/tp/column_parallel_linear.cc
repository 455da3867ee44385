#include "models/tp/column_parallel_linear.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/common/linear.h"

namespace ditserve::models::tp {

absl::StatusOr<std::unique_ptr<ColumnParallelLinear>> ColumnParallelLinear::Load(
    const sharding::ShardedStateDict& sd, const std::string& path) {
  const auto sharding = sd.ShardingOf(path);
  if (!sharding::IsColwise(sharding.style)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is planned ",
                                                   sharding::TpStyleName(sharding.style),
                                                   ", not colwise"));
  }
  torch::Tensor w, b;
  RETURN_IF_ERROR(ReadLinearTensors(sd, path, &w, &b));
  if (b.defined() && b.size(0) != w.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": colwise bias has ", b.size(0),
                                                   " elements on this rank, the weight ", w.size(0),
                                                   " rows (the bias must be sliced like the rows)"));
  }
  std::vector<int64_t> blocks;
  if (sharding.style == sharding::TpStyle::kPackedColwise) {
    blocks = sharding.local_blocks;
    const int64_t sum = std::accumulate(blocks.begin(), blocks.end(), int64_t{0});
    if (blocks.empty() || sum != w.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": packed blocks [",
                                                     absl::StrJoin(blocks, ", "), "] do not add up to ",
                                                     w.size(0), " local rows"));
    }
  }
  return std::unique_ptr<ColumnParallelLinear>(
      new ColumnParallelLinear(std::move(w), std::move(b), sharding.style, std::move(blocks)));
}

torch::Tensor ColumnParallelLinear::Forward(const torch::Tensor& x) const {
  torch::Tensor y = Gemm(x, weight_, bias_);
  AddLoraDelta(x, y);  // b holds this rank's rows of every LoRA B, a the full A
  return y;
}

}  // namespace ditserve::models::tp
