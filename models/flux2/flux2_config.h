// Flux2Transformer2DModel's config.json (diffusers transformer_flux2.py). Every size comes from the file; the defaults
// are diffusers' class defaults (FLUX.2-dev), used only for keys the file leaves out.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "models/common/transformer_config_fields.h"

namespace ditserve::models::flux2 {

struct Flux2TransformerConfig : TransformerSizes {
  // diffusers' class defaults: patch_size, in_channels, out_channels, num_layers,
  // attention_head_dim, num_attention_heads, joint_attention_dim, axes_dims_rope.
  Flux2TransformerConfig() : TransformerSizes{1, 128, 128, 8, 128, 48, 15360, {32, 32, 32, 32}} {}

  int64_t num_single_layers = 48;
  int64_t timestep_guidance_channels = 256;
  double mlp_ratio = 3.0;
  double rope_theta = 2000;
  double eps = 1e-6;
  bool guidance_embeds = true;
  // int(inner_dim * mlp_ratio), as Python truncates (Mh; 18432 for FLUX.2-dev).
  int64_t mlp_hidden_dim() const {
    return static_cast<int64_t>(static_cast<double>(inner_dim()) * mlp_ratio);
  }
};

// INVALID_ARGUMENT naming the key for a wrong type or an inconsistent value (axes_dims_rope not
// summing to attention_head_dim, odd axis widths, non-positive sizes, patch_size != 1).
absl::StatusOr<Flux2TransformerConfig> ParseFlux2TransformerConfig(const nlohmann::json& config);

// The config as JSON (the keys Parse reads), e.g. to build a model from flags.
nlohmann::json Flux2ConfigToJson(const Flux2TransformerConfig& config);

}  // namespace ditserve::models::flux2
