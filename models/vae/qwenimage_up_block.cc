#include "models/vae/qwenimage_up_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<QwenUpBlock> QwenUpBlock::Load(const sharding::ShardedStateDict& state,
                                              const std::string& prefix, int64_t in,
                                              int64_t out, int64_t num_res_blocks,
                                              QwenUpsampleMode mode) {
  QwenUpBlock blk;
  int64_t current = in;
  for (int64_t i = 0; i < num_res_blocks + 1; ++i) {
    ASSIGN_OR_RETURN(auto r, QwenResidualBlock::Load(state, absl::StrCat(prefix, ".resnets.", i),
                                                     current, out));
    blk.resnets_.push_back(std::move(r));
    current = out;
  }
  if (mode != QwenUpsampleMode::kNone) {
    ASSIGN_OR_RETURN(blk.upsample_conv_,
                     Conv2d::Load(state, prefix + ".upsamplers.0.resample.1", out, out / 2, 3));
  }
  return blk;
}

torch::Tensor QwenUpBlock::Forward(const torch::Tensor& x) const {
  torch::Tensor h = x;
  for (const auto& r : resnets_) h = r.Forward(h);
  if (!upsample_conv_) return h;
  return (*upsample_conv_)(UpsampleNearestExact2x(h));
}

}  // namespace ditserve::vae
