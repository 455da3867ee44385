#include "models/common/swiglu_feed_forward.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ditserve::models {

torch::Tensor SwiGlu(const torch::Tensor& x) {
  auto halves = x.chunk(2, /*dim=*/-1);
  return torch::silu(halves[0]) * halves[1];
}

absl::StatusOr<SwiGluFeedForward> SwiGluFeedForward::Load(const ModuleLoader& loader,
                                                          const std::string& prefix) {
  const std::string in_path = JoinPath(prefix, "linear_in");
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> in, loader.LoadLinear(in_path));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> out, loader.LoadLinear(JoinPath(prefix, "linear_out")));
  if (in->style() == sharding::TpStyle::kColwise) {
    return absl::FailedPreconditionError(
        absl::StrCat(in_path, " is planned colwise: its local rows would mix the gate and value ",
                     "halves; SwiGLU needs packed_colwise with blocks [1, 1]"));
  }
  const auto blocks = in->local_blocks();
  if (!blocks.empty() && (blocks.size() != 2 || blocks[0] != blocks[1])) {
    return absl::InvalidArgumentError(absl::StrCat(in_path, ": packed blocks [",
                                                   absl::StrJoin(blocks, ", "),
                                                   "] are not two equal (gate, value) halves"));
  }
  if (in->out_features() % 2 != 0 || out->in_features() * 2 != in->out_features()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": linear_out takes ", out->in_features(), " features on this rank but linear_in gives ",
        in->out_features(), " (", sharding::TpStyleName(in->style()), " then ",
        sharding::TpStyleName(out->style()), "); expected twice as many"));
  }
  return SwiGluFeedForward(std::move(in), std::move(out));
}

torch::Tensor SwiGluFeedForward::Forward(const torch::Tensor& x) const {
  return linear_out_->Forward(SwiGlu(linear_in_->Forward(x)));
}

}  // namespace ditserve::models
