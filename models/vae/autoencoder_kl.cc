#include "models/vae/autoencoder_kl.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::vae {

absl::StatusOr<AutoencoderKL> AutoencoderKL::Create(const AutoencoderKLConfig& config,
                                                    const sharding::ShardedStateDict& state) {
  ASSIGN_OR_RETURN(auto decoder, AutoencoderKLDecoder::Create(config, state));
  std::optional<AutoencoderKLEncoder> encoder;
  if (StateDictHasVaeEncoder(state)) {
    ASSIGN_OR_RETURN(encoder, AutoencoderKLEncoder::Create(config.encoder(), state));
  }
  return AutoencoderKL(std::move(decoder), std::move(encoder));
}

absl::StatusOr<LatentDistribution> AutoencoderKL::EncodeLatentDistribution(
    const torch::Tensor& image) const {
  if (!encoder_) {
    return absl::FailedPreconditionError("this VAE has no encoder (it takes no input image)");
  }
  return encoder_->Encode(image);
}

absl::StatusOr<torch::Tensor> AutoencoderKL::ImageLatents(const torch::Tensor& z) const {
  const auto& c = config();
  if (!z.defined() || z.dim() != 4 || z.size(1) != c.latent_channels || !z.is_floating_point()) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE image latents: expected floating (B, ", c.latent_channels,
                     ", h, w), got ", z.defined() ? c10::str(z.sizes()) : std::string("nothing")));
  }
  return GuardTorch("AutoencoderKL image latents", [&] {
    torch::NoGradGuard no_grad;
    return (z.to(device(), dtype()) - c.shift_factor) * c.scaling_factor;
  });
}

}  // namespace ditserve::vae
