#include "models/tp/row_parallel_linear.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/common/linear.h"
#include "common/torch_guard.h"

namespace ditserve::models::tp {

absl::StatusOr<std::unique_ptr<RowParallelLinear>> RowParallelLinear::Load(
    const sharding::ShardedStateDict& sd, const std::string& path, comm::Communicator* comm) {
  const auto sharding = sd.ShardingOf(path);
  if (!sharding::IsRowwise(sharding.style)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is planned ",
                                                   sharding::TpStyleName(sharding.style),
                                                   ", not rowwise"));
  }
  if (comm == nullptr || comm->world_size() != sd.world_size() || comm->rank() != sd.rank()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": a rowwise layer needs the communicator of the group its weights were sliced for (rank ",
        sd.rank(), " of ", sd.world_size(), ")"));
  }
  torch::Tensor w, b;
  RETURN_IF_ERROR(ReadLinearTensors(sd, path, &w, &b));
  if (b.defined() && b.size(0) != w.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": rowwise bias has ", b.size(0),
                                                   " elements, the weight ", w.size(0),
                                                   " rows (the bias stays replicated)"));
  }
  std::vector<int64_t> blocks;
  if (sharding.style == sharding::TpStyle::kPackedRowwise) {
    blocks = sharding.local_blocks;
    const int64_t sum = std::accumulate(blocks.begin(), blocks.end(), int64_t{0});
    if (blocks.empty() || sum != w.size(1)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": packed blocks [",
                                                     absl::StrJoin(blocks, ", "), "] do not add up to ",
                                                     w.size(1), " local columns"));
    }
  }
  return std::unique_ptr<RowParallelLinear>(
      new RowParallelLinear(std::move(w), std::move(b), sharding.style, std::move(blocks), comm));
}

int64_t RowParallelLinear::in_features() const {
  return style_ == sharding::TpStyle::kRowwiseSplitInput ? weight_.size(1) * comm_->world_size()
                                                         : weight_.size(1);
}

torch::Tensor RowParallelLinear::Forward(const torch::Tensor& x) const {
  torch::Tensor local = x;
  if (style_ == sharding::TpStyle::kRowwiseSplitInput) {
    const int64_t width = weight_.size(1);
    TORCH_CHECK(x.size(-1) == width * comm_->world_size(), "rowwise_split_input: input has ",
                x.size(-1), " features, expected ", width * comm_->world_size());
    local = x.narrow(-1, comm_->rank() * width, width);
  }
  // Bias-free partial product; all-reduce it in place (contiguous for the collective).
  auto y = Gemm(local, weight_, torch::Tensor()).contiguous();
  // LoRA: a holds this rank's columns of A, so the partial deltas sum to the whole one in the same
  // all-reduce as the partial products.
  AddLoraDelta(local, y);
  return ReduceThenBias(std::move(y));
}

torch::Tensor RowParallelLinear::ReduceThenBias(torch::Tensor partial) const {
  if (comm_->world_size() > 1) ThrowIfError(comm_->AllReduceSum(partial));
  if (bias_.defined()) partial = partial + bias_;
  return partial;
}

torch::Tensor RowParallelLinear::ForwardJoined(const std::vector<torch::Tensor>& parts) const {
  torch::Tensor y;
  if (style_ != sharding::TpStyle::kRowwiseSplitInput) y = BlockGemms(parts, weight_, torch::Tensor());
  if (!y.defined()) return LinearLayer::ForwardJoined(parts);
  return ReduceThenBias(std::move(y));
}

}  // namespace ditserve::models::tp
