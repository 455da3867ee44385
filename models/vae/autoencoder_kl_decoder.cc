#include "models/vae/autoencoder_kl_decoder.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::vae {

absl::StatusOr<AutoencoderKLDecoder> AutoencoderKLDecoder::Create(
    const AutoencoderKLConfig& config, const sharding::ShardedStateDict& state) {
  AutoencoderKLDecoder d;
  d.config_ = config;
  const int64_t groups = config.norm_num_groups;
  const std::vector<int64_t> reversed(config.block_out_channels.rbegin(),
                                      config.block_out_channels.rend());
  const int64_t top = reversed.front();

  if (config.use_post_quant_conv) {
    ASSIGN_OR_RETURN(
        d.post_quant_conv_,
        Conv2d::Load(state, "post_quant_conv", config.latent_channels, config.latent_channels, 1));
  }
  ASSIGN_OR_RETURN(d.conv_in_,
                   Conv2d::Load(state, "decoder.conv_in", config.latent_channels, top, 3));
  ASSIGN_OR_RETURN(d.mid_resnets_,
                   LoadResnets(state, "decoder.mid_block", top, top, 2, groups, config.act_fn));
  if (config.mid_block_add_attention) {
    ASSIGN_OR_RETURN(d.mid_attention_,
                     MidBlockAttention::Load(state, "decoder.mid_block.attentions.0", top, groups));
  }
  int64_t in = top;
  for (size_t i = 0; i < reversed.size(); ++i) {
    const bool last = i + 1 == reversed.size();
    ASSIGN_OR_RETURN(auto blk, UpDecoderBlock::Load(state, absl::StrCat("decoder.up_blocks.", i),
                                                    in, reversed[i], config.layers_per_block + 1,
                                                    /*add_upsample=*/!last, groups, config.act_fn));
    d.up_blocks_.push_back(std::move(blk));
    in = reversed[i];
  }
  const int64_t bottom = reversed.back();
  ASSIGN_OR_RETURN(d.norm_out_,
                   GroupNorm::Load(state, "decoder.conv_norm_out", bottom, groups, kVaeNormEps));
  ASSIGN_OR_RETURN(d.conv_out_,
                   Conv2d::Load(state, "decoder.conv_out", bottom, config.out_channels, 3));
  return d;
}

absl::Status AutoencoderKLDecoder::ValidateLatents(const torch::Tensor& z) const {
  if (!z.defined() || z.dim() != 4 || z.size(1) != config_.latent_channels || z.size(0) < 1 ||
      z.size(2) < 1 || z.size(3) < 1 || !z.is_floating_point()) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE decode expects floating latents (B, ", config_.latent_channels,
                     ", h, w), got ", z.defined() ? c10::str(z.sizes()) : std::string("nothing")));
  }
  return absl::OkStatus();
}

torch::Tensor AutoencoderKLDecoder::DecodeUnguarded(const torch::Tensor& z) const {
  torch::NoGradGuard no_grad;
  auto x = z.to(device(), dtype());
  if (post_quant_conv_) x = (*post_quant_conv_)(x);
  x = conv_in_(x);
  x = mid_resnets_[0].Forward(x);
  if (mid_attention_) x = mid_attention_->Forward(x);
  x = mid_resnets_[1].Forward(x);
  for (const auto& blk : up_blocks_) x = blk.Forward(x);
  // The decoder's output activation is SiLU regardless of act_fn.
  return conv_out_(torch::silu(norm_out_(x)));
}

absl::StatusOr<torch::Tensor> AutoencoderKLDecoder::Decode(const torch::Tensor& z) const {
  RETURN_IF_ERROR(ValidateLatents(z));
  return GuardTorch("AutoencoderKL decode", [&] { return DecodeUnguarded(z); });
}

absl::StatusOr<torch::Tensor> AutoencoderKLDecoder::DecodeLatents(
    const torch::Tensor& latents) const {
  RETURN_IF_ERROR(ValidateLatents(latents));
  return GuardTorch("AutoencoderKL decode", [&] {
    torch::NoGradGuard no_grad;
    auto z = latents.to(device(), dtype()) / config_.scaling_factor + config_.shift_factor;
    return DecodeUnguarded(z);
  });
}

}  // namespace ditserve::vae
