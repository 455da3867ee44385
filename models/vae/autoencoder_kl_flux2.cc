#include "models/vae/autoencoder_kl_flux2.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/vae/flux2_latents.h"

namespace ditserve::vae {

absl::StatusOr<AutoencoderKLFlux2> AutoencoderKLFlux2::Create(
    const AutoencoderKLFlux2Config& config, const sharding::ShardedStateDict& state) {
  ASSIGN_OR_RETURN(auto decoder, AutoencoderKLDecoder::Create(config.decoder, state));
  const int64_t c = config.patchified_channels();
  ASSIGN_OR_RETURN(auto mean, state.GetWithShape("bn.running_mean", {c}));
  ASSIGN_OR_RETURN(auto var, state.GetWithShape("bn.running_var", {c}));
  std::optional<AutoencoderKLEncoder> encoder;
  if (StateDictHasVaeEncoder(state)) {
    ASSIGN_OR_RETURN(encoder, AutoencoderKLEncoder::Create(config.encoder, state));
  }
  return AutoencoderKLFlux2(config, std::move(decoder), std::move(encoder), std::move(mean),
                            std::move(var));
}

absl::StatusOr<LatentDistribution> AutoencoderKLFlux2::EncodeLatentDistribution(
    const torch::Tensor& image) const {
  if (!encoder_) {
    return absl::FailedPreconditionError(
        "this FLUX.2 VAE has no encoder (it takes no reference image)");
  }
  return encoder_->Encode(image);
}

absl::StatusOr<torch::Tensor> AutoencoderKLFlux2::EncodeReference(
    const torch::Tensor& image) const {
  if (!encoder_) {
    return absl::FailedPreconditionError(
        "this FLUX.2 VAE has no encoder (it takes no reference image)");
  }
  // The patchify needs an even latent grid: sides multiples of twice the encoder's factor.
  RETURN_IF_ERROR(encoder_->ValidateImage(image, 2 * encoder_->scale_factor()));
  ASSIGN_OR_RETURN(LatentDistribution dist, encoder_->Encode(image));
  ASSIGN_OR_RETURN(torch::Tensor patchified, PatchifyFlux2Latents(dist.mean));
  return NormalizeFlux2Latents(patchified, running_mean_, running_var_, config_.batch_norm_eps);
}

absl::StatusOr<torch::Tensor> AutoencoderKLFlux2::Decode(const torch::Tensor& z) const {
  // AutoencoderKLFlux2._decode: post_quant_conv then Decoder, which is AutoencoderKL's decode.
  return decoder_.Decode(z);
}

absl::StatusOr<torch::Tensor> AutoencoderKLFlux2::LatentsForDecode(
    const torch::Tensor& patchified) const {
  if (!patchified.defined() || patchified.dim() != 4 ||
      patchified.size(1) != config_.patchified_channels()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FLUX.2 VAE: expected patchified latents (B, ", config_.patchified_channels(),
        ", h, w), got ", patchified.defined() ? c10::str(patchified.sizes()) : "nothing"));
  }
  ASSIGN_OR_RETURN(auto z, DenormalizeFlux2Latents(patchified, running_mean_, running_var_,
                                                   config_.batch_norm_eps));
  return UnpatchifyFlux2Latents(z);
}

absl::StatusOr<torch::Tensor> AutoencoderKLFlux2::DecodePackedLatents(
    const torch::Tensor& tokens, const torch::Tensor& latent_ids) const {
  ASSIGN_OR_RETURN(auto patchified, UnpackFlux2TokensWithIds(tokens, latent_ids));
  ASSIGN_OR_RETURN(auto z, LatentsForDecode(patchified));
  return Decode(z);
}

absl::StatusOr<torch::Tensor> AutoencoderKLFlux2::DecodePackedLatents(const torch::Tensor& tokens,
                                                                      int64_t height,
                                                                      int64_t width) const {
  ASSIGN_OR_RETURN(auto patchified, UnpackFlux2Tokens(tokens, height, width));
  ASSIGN_OR_RETURN(auto z, LatentsForDecode(patchified));
  return Decode(z);
}

}  // namespace ditserve::vae
