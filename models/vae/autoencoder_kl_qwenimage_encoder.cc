#include "models/vae/autoencoder_kl_qwenimage_encoder.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::vae {
namespace {

std::string Describe(const torch::Tensor& t) {
  return t.defined() ? absl::StrCat(c10::str(t.sizes()), " ", c10::toString(t.scalar_type()))
                     : std::string("nothing");
}

// The (B, C, H, W) frame of valid pixels.
torch::Tensor Frame(const torch::Tensor& pixels) {
  return pixels.dim() == 5 ? pixels.select(2, 0) : pixels;
}

}  // namespace

absl::StatusOr<AutoencoderKLQwenImageEncoder> AutoencoderKLQwenImageEncoder::Create(
    const AutoencoderKLQwenImageConfig& config, const sharding::ShardedStateDict& state) {
  const std::vector<int64_t> dims = config.encoder_dims();
  const size_t num_stages = config.dim_mult.size();
  if (config.temperal_downsample.size() + 1 != num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("Qwen-Image VAE encoder: ", config.temperal_downsample.size(),
                     " temperal_downsample entries for ", num_stages, " dim_mult stages"));
  }
  // QwenImageEncoder3d.__init__: `if scale in attn_scales` after each residual block, scale 1.0
  // halved after each downsampler.
  double scale = 1.0;
  for (size_t i = 0; i < num_stages; ++i) {
    if (std::find(config.attn_scales.begin(), config.attn_scales.end(), scale) !=
        config.attn_scales.end()) {
      return absl::UnimplementedError(absl::StrCat(
          "Qwen-Image VAE encoder: attn_scales lists ", scale,
          ", which puts attention layers in encoder.down_blocks; diffusers' "
          "QwenImageEncoder3d.forward cannot run them (QwenImageAttentionBlock takes no "
          "feature cache)"));
    }
    if (i + 1 != num_stages) scale /= 2.0;
  }

  AutoencoderKLQwenImageEncoder e;
  e.config_ = config;
  const int64_t moments = 2 * config.z_dim;
  ASSIGN_OR_RETURN(e.conv_in_, CausalConv3dFrame::Load(state, "encoder.conv_in",
                                                       config.input_channels, dims[0], 3, 3));
  int64_t index = 0;
  for (size_t i = 0; i < num_stages; ++i) {
    QwenDownsampleMode mode = QwenDownsampleMode::kNone;
    if (i + 1 != num_stages) {
      mode = config.temperal_downsample[i] ? QwenDownsampleMode::kDownsample3d
                                           : QwenDownsampleMode::kDownsample2d;
    }
    ASSIGN_OR_RETURN(auto blk, QwenDownBlock::Load(state, "encoder.down_blocks", index, dims[i],
                                                   dims[i + 1], config.num_res_blocks, mode));
    index += blk.num_layers();
    e.down_blocks_.push_back(std::move(blk));
  }
  const int64_t top = dims.back();
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(auto r, QwenResidualBlock::Load(
                                 state, absl::StrCat("encoder.mid_block.resnets.", i), top, top));
    e.mid_resnets_.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(e.mid_attention_,
                   QwenAttentionBlock::Load(state, "encoder.mid_block.attentions.0", top));
  ASSIGN_OR_RETURN(e.norm_out_,
                   ChannelRmsNorm::Load(state, "encoder.norm_out", top, /*images=*/false));
  ASSIGN_OR_RETURN(e.conv_out_,
                   CausalConv3dFrame::Load(state, "encoder.conv_out", top, moments, 3, 3));
  ASSIGN_OR_RETURN(e.quant_conv_,
                   CausalConv3dFrame::Load(state, "quant_conv", moments, moments, 1, 1));
  return e;
}

absl::Status AutoencoderKLQwenImageEncoder::ValidatePixels(const torch::Tensor& pixels,
                                                           int64_t side_multiple) const {
  const int64_t m = std::max<int64_t>(side_multiple, 1);
  const bool layout_ok = pixels.defined() && (pixels.dim() == 4 || pixels.dim() == 5) &&
                         pixels.is_floating_point() && pixels.size(0) >= 1 &&
                         pixels.size(1) == config_.input_channels;
  if (layout_ok && pixels.dim() == 5 && pixels.size(2) != 1) {
    return absl::UnimplementedError(
        absl::StrCat("Qwen-Image VAE encode supports one frame (T = 1), got T = ", pixels.size(2)));
  }
  const int64_t h = layout_ok ? pixels.size(-2) : 0, w = layout_ok ? pixels.size(-1) : 0;
  if (!layout_ok || h < m || w < m || h % m != 0 || w % m != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Qwen-Image VAE encode expects floating pixels (B, ", config_.input_channels,
        ", H, W) or (B, ", config_.input_channels, ", 1, H, W) with H and W positive multiples of ",
        m, ", got ", Describe(pixels)));
  }
  return absl::OkStatus();
}

torch::Tensor AutoencoderKLQwenImageEncoder::MomentsFrame(const torch::Tensor& frame) const {
  torch::NoGradGuard no_grad;
  auto x = conv_in_(frame.to(device(), dtype()));
  for (const auto& blk : down_blocks_) x = blk.Forward(x);
  x = mid_resnets_[0].Forward(x);
  x = mid_attention_.Forward(x);
  x = mid_resnets_[1].Forward(x);
  x = conv_out_(torch::silu(norm_out_(x)));
  return quant_conv_(x);
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImageEncoder::EncodeMoments(
    const torch::Tensor& pixels) const {
  RETURN_IF_ERROR(ValidatePixels(pixels, scale_factor()));
  return GuardTorch("AutoencoderKLQwenImage encode",
                    [&] { return MomentsFrame(Frame(pixels)).unsqueeze(2); });
}

absl::StatusOr<LatentDistribution> AutoencoderKLQwenImageEncoder::Encode(
    const torch::Tensor& pixels) const {
  ASSIGN_OR_RETURN(torch::Tensor moments, EncodeMoments(pixels));
  // DiagonalGaussianDistribution's arithmetic on the frame (chunk along dim 1, clamp, exp).
  ASSIGN_OR_RETURN(LatentDistribution dist, LatentDistributionFromMoments(moments.select(2, 0)));
  return LatentDistribution{dist.mean.unsqueeze(2), dist.std.unsqueeze(2)};
}

absl::StatusOr<torch::Tensor> AutoencoderKLQwenImageEncoder::EncodeMode(
    const torch::Tensor& pixels) const {
  ASSIGN_OR_RETURN(torch::Tensor moments, EncodeMoments(pixels));
  // torch.chunk(parameters, 2, dim=1)[0].
  return moments.narrow(1, 0, config_.z_dim);
}

}  // namespace ditserve::vae
