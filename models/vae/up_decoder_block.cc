#include "models/vae/up_decoder_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<UpDecoderBlock> UpDecoderBlock::Load(const sharding::ShardedStateDict& state,
                                                    const std::string& prefix, int64_t in,
                                                    int64_t out, int64_t num_resnets,
                                                    bool add_upsample, int64_t groups,
                                                    VaeActivation act) {
  UpDecoderBlock blk;
  ASSIGN_OR_RETURN(blk.resnets_, LoadResnets(state, prefix, in, out, num_resnets, groups, act));
  if (add_upsample) {
    ASSIGN_OR_RETURN(blk.upsample_conv_,
                     Conv2d::Load(state, prefix + ".upsamplers.0.conv", out, out, 3));
  }
  return blk;
}

torch::Tensor UpDecoderBlock::Forward(const torch::Tensor& x) const {
  const torch::Tensor h = ForwardResnets(resnets_, x);
  if (!upsample_conv_) return h;
  // Nearest x2 copies values, so computing it in float32 is exact; it also sidesteps missing
  // bfloat16 upsampling kernels in older LibTorch builds (diffusers does the same).
  const auto dtype = h.scalar_type();
  auto up = h.scalar_type() == torch::kBFloat16 ? h.to(torch::kFloat) : h;
  up = torch::nn::functional::interpolate(up.contiguous(),
                                          torch::nn::functional::InterpolateFuncOptions()
                                              .scale_factor(std::vector<double>{2.0, 2.0})
                                              .mode(torch::kNearest));
  return (*upsample_conv_)(up.to(dtype));
}

}  // namespace ditserve::vae
