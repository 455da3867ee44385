#include "models/vae/down_encoder_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<DownEncoderBlock> DownEncoderBlock::Load(const sharding::ShardedStateDict& state,
                                                        const std::string& prefix, int64_t in,
                                                        int64_t out, int64_t num_resnets,
                                                        bool add_downsample, int64_t groups,
                                                        VaeActivation act) {
  DownEncoderBlock blk;
  ASSIGN_OR_RETURN(blk.resnets_, LoadResnets(state, prefix, in, out, num_resnets, groups, act));
  if (add_downsample) {
    ASSIGN_OR_RETURN(blk.downsample_conv_,
                     Conv2d::Load(state, prefix + ".downsamplers.0.conv", out, out, 3));
  }
  return blk;
}

torch::Tensor DownEncoderBlock::Forward(const torch::Tensor& x) const {
  const torch::Tensor h = ForwardResnets(resnets_, x);
  if (!downsample_conv_) return h;
  return PadRightBottomStride2(h, *downsample_conv_);
}

}  // namespace ditserve::vae
