// Configuration of a diffusers AutoencoderKL (decoder and encoder halves), read from the VAE's
// config.json. Missing fields take AutoencoderKL.__init__ defaults, as from_pretrained would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace ditserve::vae {

enum class VaeActivation { kSilu, kMish, kGelu, kRelu };

inline constexpr char kDownEncoderBlock2D[] = "DownEncoderBlock2D";

// diffusers' vae.Encoder (double_z) plus quant_conv, the encode half of AutoencoderKL and
// AutoencoderKLFlux2: in_channels -> 2 * latent_channels moments.
struct VaeEncoderConfig {
  int64_t in_channels = 3;
  int64_t latent_channels = 4;
  std::vector<int64_t> block_out_channels = {64};
  // One per block; the parsers accept only DownEncoderBlock2D. The encoder refuses a count other
  // than block_out_channels.size() when it is built (a decoder-only load never looks).
  std::vector<std::string> down_block_types = {kDownEncoderBlock2D};
  int64_t layers_per_block = 1;
  int64_t norm_num_groups = 32;
  VaeActivation act_fn = VaeActivation::kSilu;
  bool mid_block_add_attention = true;
  bool use_quant_conv = true;

  // Spatial downsampling: 2^(number of blocks - 1) (8 for the FLUX.1 and FLUX.2 VAEs).
  int64_t scale_factor() const {
    return int64_t{1} << (static_cast<int64_t>(block_out_channels.size()) - 1);
  }
};

struct AutoencoderKLConfig {
  int64_t in_channels = 3;  // the encoder's image channels
  int64_t latent_channels = 4;
  int64_t out_channels = 3;
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;
  int64_t norm_num_groups = 32;
  VaeActivation act_fn = VaeActivation::kSilu;
  bool mid_block_add_attention = true;
  bool use_post_quant_conv = true;
  // The encoder half (see VaeEncoderConfig).
  std::vector<std::string> down_block_types = {kDownEncoderBlock2D};
  bool use_quant_conv = true;
  double scaling_factor = 0.18215;
  double shift_factor = 0.0;  // null in config.json means no shift

  // Spatial upsampling of the decoder: 2^(number of blocks - 1) (8 for the FLUX.1 VAE).
  int64_t scale_factor() const {
    return int64_t{1} << (static_cast<int64_t>(block_out_channels.size()) - 1);
  }
  // The encoder's configuration: AutoencoderKL builds Encoder and Decoder from the same fields.
  VaeEncoderConfig encoder() const;
};

// Parses config.json text; INVALID_ARGUMENT on malformed JSON, unsupported block types (up or
// down) or activations, non-positive sizes, and channel counts not divisible by norm_num_groups.
absl::StatusOr<AutoencoderKLConfig> ParseAutoencoderKLConfig(const std::string& json_text);
// The same checks on an already parsed object (what ParseAutoencoderKLConfig does after
// parsing; the config fuzzer parses an input once for every parser).
absl::StatusOr<AutoencoderKLConfig> AutoencoderKLConfigFromJson(const nlohmann::json& j);
// Reads and parses a config.json file (NOT_FOUND if it cannot be read).
absl::StatusOr<AutoencoderKLConfig> LoadAutoencoderKLConfig(const std::string& path);

}  // namespace ditserve::vae
