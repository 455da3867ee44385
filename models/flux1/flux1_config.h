// FluxTransformer2DModel's config.json (diffusers transformer_flux.py). Every size comes from the file; the defaults
// are diffusers' class defaults, used only for keys the file leaves out.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace ditserve::models::flux1 {

struct FluxTransformerConfig {
  int64_t patch_size = 1;
  int64_t in_channels = 64;
  int64_t out_channels = 64;  // null in the file → in_channels
  int64_t num_layers = 19;
  int64_t num_single_layers = 38;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 4096;
  int64_t pooled_projection_dim = 768;
  bool guidance_embeds = false;
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
};

// INVALID_ARGUMENT naming the key for a wrong type or an inconsistent value (axes_dims_rope not
// summing to attention_head_dim, odd axis widths, non-positive sizes, patch_size != 1).
absl::StatusOr<FluxTransformerConfig> ParseFluxTransformerConfig(const nlohmann::json& config);

}  // namespace ditserve::models::flux1
