// FluxTransformer2DModel's config.json (diffusers transformer_flux.py). Every size comes from the file; the defaults
// are diffusers' class defaults, used only for keys the file leaves out.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "models/common/transformer_config_fields.h"

namespace ditserve::models::flux1 {

struct FluxTransformerConfig : TransformerSizes {
  // diffusers' class defaults: patch_size, in_channels, out_channels, num_layers,
  // attention_head_dim, num_attention_heads, joint_attention_dim, axes_dims_rope.
  FluxTransformerConfig() : TransformerSizes{1, 64, 64, 19, 128, 24, 4096, {16, 56, 56}} {}

  int64_t num_single_layers = 38;
  int64_t pooled_projection_dim = 768;
  bool guidance_embeds = false;
};

// INVALID_ARGUMENT naming the key for a wrong type or an inconsistent value (axes_dims_rope not
// summing to attention_head_dim, odd axis widths, non-positive sizes, patch_size != 1).
absl::StatusOr<FluxTransformerConfig> ParseFluxTransformerConfig(const nlohmann::json& config);

}  // namespace ditserve::models::flux1
