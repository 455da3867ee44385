#include "models/vae/autoencoder_kl_encoder.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::vae {
namespace {

std::string Shape(const torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("nothing");
}

}  // namespace

bool StateDictHasVaeEncoder(const sharding::ShardedStateDict& state) {
  return state.Contains("encoder.conv_in.weight");
}

absl::StatusOr<torch::Tensor> SampleLatent(const LatentDistribution& dist,
                                           const torch::Tensor& eps) {
  if (!dist.mean.defined() || !dist.std.defined() || dist.mean.sizes() != dist.std.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("VAE latent sample: mean ", Shape(dist.mean),
                                                   " and std ", Shape(dist.std), " do not match"));
  }
  if (!eps.defined() || !eps.is_floating_point() || eps.sizes() != dist.mean.sizes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE latent sample: expected floating noise of shape ", Shape(dist.mean),
                     ", got ", Shape(eps)));
  }
  return GuardTorch("VAE latent sample", [&] {
    torch::NoGradGuard no_grad;
    return dist.mean + dist.std * eps.to(dist.mean.device(), dist.mean.scalar_type());
  });
}

absl::StatusOr<LatentDistribution> LatentDistributionFromMoments(const torch::Tensor& moments) {
  if (!moments.defined() || moments.dim() != 4 || !moments.is_floating_point() ||
      moments.size(1) % 2 != 0 || moments.size(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE moments: expected floating (B, 2C, h, w), got ", Shape(moments)));
  }
  return GuardTorch("VAE latent distribution", [&] {
    torch::NoGradGuard no_grad;
    auto chunks = moments.chunk(2, /*dim=*/1);
    auto logvar = torch::clamp(chunks[1], -30.0, 20.0);
    return LatentDistribution{chunks[0], torch::exp(0.5 * logvar)};
  });
}

absl::StatusOr<AutoencoderKLEncoder> AutoencoderKLEncoder::Create(
    const VaeEncoderConfig& config, const sharding::ShardedStateDict& state) {
  const auto& channels = config.block_out_channels;
  if (channels.empty() || config.down_block_types.size() != channels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE encoder: ", config.down_block_types.size(), " down blocks (",
                     absl::StrJoin(config.down_block_types, ", "), ") for ", channels.size(),
                     " block_out_channels"));
  }
  for (const auto& t : config.down_block_types) {
    if (t != kDownEncoderBlock2D) {
      return absl::InvalidArgumentError(
          absl::StrCat("VAE encoder: unsupported down block type '", t, "'"));
    }
  }
  if (config.in_channels <= 0 || config.latent_channels <= 0 || config.layers_per_block < 0 ||
      config.norm_num_groups <= 0) {
    return absl::InvalidArgumentError("VAE encoder: non-positive size in the config");
  }
  for (int64_t ch : channels) {
    if (ch <= 0 || ch % config.norm_num_groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat("VAE encoder: block channels ", ch,
                                                     " not divisible by norm_num_groups ",
                                                     config.norm_num_groups));
    }
  }

  AutoencoderKLEncoder e;
  e.config_ = config;
  const int64_t groups = config.norm_num_groups;
  ASSIGN_OR_RETURN(e.conv_in_,
                   Conv2d::Load(state, "encoder.conv_in", config.in_channels, channels[0], 3));
  int64_t in = channels[0];
  for (size_t i = 0; i < channels.size(); ++i) {
    const bool last = i + 1 == channels.size();
    ASSIGN_OR_RETURN(auto blk,
                     DownEncoderBlock::Load(state, absl::StrCat("encoder.down_blocks.", i), in,
                                            channels[i], config.layers_per_block,
                                            /*add_downsample=*/!last, groups, config.act_fn));
    e.down_blocks_.push_back(std::move(blk));
    in = channels[i];
  }
  const int64_t top = channels.back();
  ASSIGN_OR_RETURN(e.mid_resnets_,
                   LoadResnets(state, "encoder.mid_block", top, top, 2, groups, config.act_fn));
  if (config.mid_block_add_attention) {
    ASSIGN_OR_RETURN(e.mid_attention_,
                     MidBlockAttention::Load(state, "encoder.mid_block.attentions.0", top, groups));
  }
  ASSIGN_OR_RETURN(e.norm_out_,
                   GroupNorm::Load(state, "encoder.conv_norm_out", top, groups, kVaeNormEps));
  const int64_t moments = 2 * config.latent_channels;  // double_z
  ASSIGN_OR_RETURN(e.conv_out_, Conv2d::Load(state, "encoder.conv_out", top, moments, 3));
  if (config.use_quant_conv) {
    ASSIGN_OR_RETURN(e.quant_conv_, Conv2d::Load(state, "quant_conv", moments, moments, 1));
  }
  return e;
}

absl::Status AutoencoderKLEncoder::ValidateImage(const torch::Tensor& image,
                                                 int64_t side_multiple) const {
  const int64_t m = std::max<int64_t>(side_multiple, 1);
  if (!image.defined() || image.dim() != 4 || !image.is_floating_point() || image.size(0) < 1 ||
      image.size(1) != config_.in_channels || image.size(2) < m || image.size(3) < m ||
      image.size(2) % m != 0 || image.size(3) % m != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VAE encode expects a floating image (B, ", config_.in_channels,
        ", H, W) with H and W positive multiples of ", m, ", got ",
        image.defined() ? absl::StrCat(Shape(image), " ", c10::toString(image.scalar_type()))
                        : std::string("nothing")));
  }
  return absl::OkStatus();
}

torch::Tensor AutoencoderKLEncoder::MomentsUnguarded(const torch::Tensor& image) const {
  torch::NoGradGuard no_grad;
  auto x = conv_in_(image.to(device(), dtype()));
  for (const auto& blk : down_blocks_) x = blk.Forward(x);
  x = mid_resnets_[0].Forward(x);
  if (mid_attention_) x = mid_attention_->Forward(x);
  x = mid_resnets_[1].Forward(x);
  // The encoder's output activation is SiLU regardless of act_fn (conv_act = nn.SiLU()).
  x = conv_out_(torch::silu(norm_out_(x)));
  if (quant_conv_) x = (*quant_conv_)(x);
  return x;
}

absl::StatusOr<torch::Tensor> AutoencoderKLEncoder::EncodeMoments(
    const torch::Tensor& image) const {
  RETURN_IF_ERROR(ValidateImage(image, scale_factor()));
  return GuardTorch("AutoencoderKL encode", [&] { return MomentsUnguarded(image); });
}

absl::StatusOr<LatentDistribution> AutoencoderKLEncoder::Encode(const torch::Tensor& image) const {
  ASSIGN_OR_RETURN(torch::Tensor moments, EncodeMoments(image));
  return LatentDistributionFromMoments(moments);
}

}  // namespace ditserve::vae
