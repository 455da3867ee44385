#include "models/vae/autoencoder_kl_qwenimage.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/vae/qwenimage_latents.h"

namespace ditserve::vae {

absl::StatusOr<AutoencoderKLQwenImage> AutoencoderKLQwenImage::Create(
    const AutoencoderKLQwenImageConfig& config, const sharding::ShardedStateDict& state) {
  AutoencoderKLQwenImage d;
  d.config_ = config;
  const std::vector<int64_t> dims = config.decoder_dims();
  const std::vector<bool> temporal = config.temperal_upsample();
  const int64_t z = config.z_dim;

  ASSIGN_OR_RETURN(d.post_quant_conv_,
                   CausalConv3dFrame::Load(state, "post_quant_conv", z, z, 1, 1));
  ASSIGN_OR_RETURN(d.conv_in_, CausalConv3dFrame::Load(state, "decoder.conv_in", z, dims[0], 3, 3));
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(auto r,
                     QwenResidualBlock::Load(state, absl::StrCat("decoder.mid_block.resnets.", i),
                                             dims[0], dims[0]));
    d.mid_resnets_.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(d.mid_attention_,
                   QwenAttentionBlock::Load(state, "decoder.mid_block.attentions.0", dims[0]));

  const size_t num_blocks = config.dim_mult.size();
  for (size_t i = 0; i < num_blocks; ++i) {
    const int64_t in = i > 0 ? dims[i] / 2 : dims[i];
    const int64_t out = dims[i + 1];
    QwenUpsampleMode mode = QwenUpsampleMode::kNone;
    if (i + 1 != num_blocks) {
      mode = temporal[i] ? QwenUpsampleMode::kUpsample3d : QwenUpsampleMode::kUpsample2d;
    }
    ASSIGN_OR_RETURN(auto blk, QwenUpBlock::Load(state, absl::StrCat("decoder.up_blocks.", i), in,
                                                 out, config.num_res_blocks, mode));
    d.up_blocks_.push_back(std::move(blk));
  }
  const int64_t last = dims.back();
  ASSIGN_OR_RETURN(d.norm_out_,
                   ChannelRmsNorm::Load(state, "decoder.norm_out", last, /*images=*/false));
  ASSIGN_OR_RETURN(d.conv_out_, CausalConv3dFrame::Load(state, "decoder.conv_out", last,
                                                        config.input_channels, 3, 3));
  if (StateDictHasVaeEncoder(state)) {
    ASSIGN_OR_RETURN(d.encoder_, AutoencoderKLQwenImageEncoder::Create(config, state));
  }
  return d;
}

absl::Status AutoencoderKLQwenImage::ValidateLatents(const torch::Tensor& z) const {
  if (!z.defined() || z.dim() != 5 || z.size(1) != config_.z_dim || z.size(0) < 1 ||
      z.size(3) < 1 || z.size(4) < 1 || !z.is_floating_point()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Qwen-Image VAE decode expects floating latents (B, ", config_.z_dim, ", 1, h, w), got ",
        z.defined() ? c10::str(z.sizes()) : std::string("nothing")));
  }
  if (z.size(2) != 1) {
    return absl::UnimplementedError(
        absl::StrCat("Qwen-Image VAE decode supports one frame (T = 1), got T = ", z.size(2)));
  }
  return absl::OkStatus();
}

torch::Tensor AutoencoderKLQwenImage::DecodeFrame(const torch::Tensor& z) const {
  torch::NoGradGuard no_grad;
  auto x = post_quant_conv_(z.to(device(), dtype()));
  x = conv_in_(x);
  x = mid_resnets_[0].Forward(x);
  x = mid_attention_.Forward(x);
  x = mid_resnets_[1].Forward(x);
  for (const auto& blk : up_blocks_) x = blk.Forward(x);
  x = conv_out_(torch::silu(norm_out_(x)));
  return torch::clamp(x, -1.0, 1.0);
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImage::Decode(const torch::Tensor& z) const {
  RETURN_IF_ERROR(ValidateLatents(z));
  return GuardTorch("AutoencoderKLQwenImage decode",
                    [&] { return DecodeFrame(z.select(2, 0)).unsqueeze(2); });
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImage::DecodeLatents(
    const torch::Tensor& latents) const {
  RETURN_IF_ERROR(ValidateLatents(latents));
  ASSIGN_OR_RETURN(auto z, DenormalizeQwenImageLatents(latents, config_.latents_mean,
                                                       config_.latents_std, dtype()));
  // vae.decode(z)[:, :, 0]: the single decoded frame.
  return GuardTorch("AutoencoderKLQwenImage decode", [&] { return DecodeFrame(z.select(2, 0)); });
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImage::DecodePackedLatents(
    const torch::Tensor& tokens, int64_t latent_height, int64_t latent_width) const {
  ASSIGN_OR_RETURN(auto latents, UnpackQwenImageTokens(tokens, latent_height, latent_width));
  return DecodeLatents(latents);
}

absl::Status AutoencoderKLQwenImage::RequireEncoder() const {
  return encoder_ ? absl::OkStatus()
                  : absl::FailedPreconditionError(
                        "this Qwen-Image VAE has no encoder (it takes no input image)");
}

absl::StatusOr<LatentDistribution> AutoencoderKLQwenImage::EncodeLatentDistribution(
    const torch::Tensor& pixels) const {
  RETURN_IF_ERROR(RequireEncoder());
  return encoder_->Encode(pixels);
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImage::EncodeMode(
    const torch::Tensor& pixels) const {
  RETURN_IF_ERROR(RequireEncoder());
  return encoder_->EncodeMode(pixels);
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImage::EncodeImageLatents(
    const torch::Tensor& pixels) const {
  ASSIGN_OR_RETURN(torch::Tensor mode, EncodeMode(pixels));
  return NormalizeQwenImageLatents(mode, config_.latents_mean, config_.latents_std);
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImage::ImageToImageLatents(
    const torch::Tensor& z) const {
  return ScaleQwenImageImg2ImgLatents(z, config_.latents_mean, config_.latents_std);
}

}  // namespace ditserve::vae
