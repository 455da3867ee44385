// Configuration of a diffusers AutoencoderKL (the decoder half), read from the VAE's config.json.
// Missing fields take AutoencoderKL.__init__ defaults, as from_pretrained would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::vae {

enum class VaeActivation { kSilu, kMish, kGelu, kRelu };

struct AutoencoderKLConfig {
  int64_t latent_channels = 4;
  int64_t out_channels = 3;
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;
  int64_t norm_num_groups = 32;
  VaeActivation act_fn = VaeActivation::kSilu;
  bool mid_block_add_attention = true;
  bool use_post_quant_conv = true;
  double scaling_factor = 0.18215;
  double shift_factor = 0.0;  // null in config.json means no shift

  // Spatial upsampling of the decoder: 2^(number of blocks - 1) (8 for the FLUX.1 VAE).
  int64_t scale_factor() const {
    return int64_t{1} << (static_cast<int64_t>(block_out_channels.size()) - 1);
  }
};

// Parses config.json text; INVALID_ARGUMENT on malformed JSON, unsupported block types or
// activations, and channel counts not divisible by norm_num_groups.
absl::StatusOr<AutoencoderKLConfig> ParseAutoencoderKLConfig(const std::string& json_text);
// Reads and parses a config.json file (NOT_FOUND if it cannot be read).
absl::StatusOr<AutoencoderKLConfig> LoadAutoencoderKLConfig(const std::string& path);

}  // namespace ditserve::vae
