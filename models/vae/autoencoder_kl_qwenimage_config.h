// Configuration of diffusers' AutoencoderKLQwenImage (Qwen-Image's causal 3-D VAE, a fine-tuned
// Wan 2.1 VAE), read from the VAE's config.json. Missing or null fields take
// AutoencoderKLQwenImage.__init__ defaults, as from_pretrained would.
//
// Decoder channel plan (QwenImageDecoder3d): dims = base_dim * [dim_mult[-1]] + reversed(dim_mult);
// up block i maps in_i -> dims[i + 1] with in_0 = dims[0] and in_i = dims[i] / 2 (the previous
// block's upsampler halves the channels), holds num_res_blocks + 1 residual blocks, and all but
// the last end in an upsampler, "upsample3d" if reversed(temperal_downsample)[i] else
// "upsample2d". The decoder has no attention outside its mid block (attn_scales is encoder-only)
// and always uses SiLU.
//
// Encoder channel plan (QwenImageEncoder3d): dims = base_dim * ([1] + dim_mult); stage i maps
// dims[i] -> dims[i + 1] with num_res_blocks residual blocks (the first changes the channels),
// all but the last stage ending in a downsampler ("downsample3d" if temperal_downsample[i] else
// "downsample2d"); the stages' layers form one flat list, down_blocks.{0, 1, ...}. An attention
// layer would follow each residual block of a stage whose scale (1, 1/2, 1/4, ... halved after
// each downsampler) is in attn_scales; diffusers' encoder cannot run such a layer (see
// autoencoder_kl_qwenimage_encoder.h), so the encoder refuses it. conv_out gives 2 * z_dim
// channels (mean and logvar).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace ditserve::vae {

struct AutoencoderKLQwenImageConfig {
  int64_t base_dim = 96;
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<bool> temperal_downsample = {false, true, true};  // diffusers' spelling
  int64_t input_channels = 3;                                   // the image channels
  std::vector<double> attn_scales;                              // encoder only; default []
  // z_dim values each (latents_std non-zero); defaults: diffusers' constants.
  std::vector<double> latents_mean = {-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653,
                                      -0.1517, 1.5508,  0.4134,  -0.0715, 0.5517,  -0.3632,
                                      -0.1922, -0.9497, 0.2503,  -0.2921};
  std::vector<double> latents_std = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708,
                                     2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                                     1.6382, 1.1253, 2.8251, 1.9160};

  // The decoder's temporal upsampling flags: reversed(temperal_downsample).
  std::vector<bool> temperal_upsample() const {
    return std::vector<bool>(temperal_downsample.rbegin(), temperal_downsample.rend());
  }
  // QwenImagePipeline.vae_scale_factor = 2^len(temperal_downsample) (8 for the real VAE).
  int64_t scale_factor() const {
    return int64_t{1} << static_cast<int64_t>(temperal_downsample.size());
  }
  // dims of QwenImageDecoder3d (len(dim_mult) + 1 values).
  std::vector<int64_t> decoder_dims() const;
  // dims of QwenImageEncoder3d (len(dim_mult) + 1 values): base_dim * ([1] + dim_mult).
  std::vector<int64_t> encoder_dims() const;
};

// Parses config.json text; INVALID_ARGUMENT naming the field on malformed JSON, a wrong type or an
// unsupported value (non-positive sizes, len(temperal_downsample) != len(dim_mult) - 1,
// latents_mean / latents_std not of length z_dim, a zero latents_std, attn_scales not a list of
// numbers). dropout is not read (the identity at inference).
absl::StatusOr<AutoencoderKLQwenImageConfig> ParseAutoencoderKLQwenImageConfig(
    const std::string& json_text);
// The same checks on an already parsed object (what ParseAutoencoderKLQwenImageConfig does after
// parsing; the config fuzzer parses an input once for every parser).
absl::StatusOr<AutoencoderKLQwenImageConfig> AutoencoderKLQwenImageConfigFromJson(
    const nlohmann::json& j);
// Reads and parses a config.json file: NOT_FOUND if it cannot be read; errors start with the path.
absl::StatusOr<AutoencoderKLQwenImageConfig> LoadAutoencoderKLQwenImageConfig(
    const std::string& path);

}  // namespace ditserve::vae
