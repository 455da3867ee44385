// Configuration of diffusers' AutoencoderKLFlux2 (FLUX.2's VAE), the parts its decode and encode
// paths use, read from the VAE's config.json. Missing or null fields take
// AutoencoderKLFlux2.__init__ defaults (which differ from AutoencoderKL's: 4 blocks (128, 256, 512,
// 512), 2 layers per block, 32 latent channels, post_quant_conv on), as from_pretrained would.
//
// The decoder is diffusers' shared `Decoder` built with `decoder_block_out_channels or
// block_out_channels`, so its part is an AutoencoderKLConfig (scaling/shift factors unused: FLUX.2
// de-normalises with the BatchNorm statistics instead). The Encoder is built with
// block_out_channels (never decoder_block_out_channels) and the shared fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_config.h"

namespace ditserve::vae {

struct AutoencoderKLFlux2Config {
  // The Decoder and post_quant_conv (block_out_channels = the decoder's channels).
  AutoencoderKLConfig decoder;
  // The encoder's block_out_channels: the pipeline's vae_scale_factor comes from these.
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  // The Encoder and quant_conv (block_out_channels as above; in_channels, latent_channels,
  // layers_per_block, norm_num_groups, act_fn, mid_block_add_attention shared with the decoder).
  VaeEncoderConfig encoder;
  // bn: BatchNorm2d(patch_h * patch_w * latent_channels, eps=batch_norm_eps), running stats only.
  double batch_norm_eps = 1e-4;
  std::vector<int64_t> patch_size = {2, 2};

  int64_t latent_channels() const { return decoder.latent_channels; }
  // Channels of the patchified latents the transformer sees (and of bn): 4 * latent_channels.
  int64_t patchified_channels() const { return patch_size[0] * patch_size[1] * latent_channels(); }
  // Flux2Pipeline.vae_scale_factor = 2^(len(vae.config.block_out_channels) - 1).
  int64_t pipeline_vae_scale_factor() const {
    return int64_t{1} << (static_cast<int64_t>(block_out_channels.size()) - 1);
  }
};

// Parses config.json text; INVALID_ARGUMENT naming the field on malformed JSON, a wrong type, an
// unsupported value (up block type, act_fn, a patch_size other than [2, 2] -- the pipeline's
// un-patchify is fixed at 2x2 --, a negative batch_norm_eps) or inconsistent channel counts.
absl::StatusOr<AutoencoderKLFlux2Config> ParseAutoencoderKLFlux2Config(
    const std::string& json_text);
// The same checks on an already parsed object (what ParseAutoencoderKLFlux2Config does after
// parsing; the config fuzzer parses an input once for every parser).
absl::StatusOr<AutoencoderKLFlux2Config> AutoencoderKLFlux2ConfigFromJson(const nlohmann::json& j);
// Reads and parses a config.json file: NOT_FOUND if it cannot be read; errors start with the path.
absl::StatusOr<AutoencoderKLFlux2Config> LoadAutoencoderKLFlux2Config(const std::string& path);

}  // namespace ditserve::vae
