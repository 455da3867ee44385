// QwenImageTransformer2DModel's config.json (diffusers transformer_qwenimage.py). Every size comes from the file; the
// defaults are diffusers' class defaults (Qwen-Image), used only for keys the file leaves out.
// The variants' switches (guidance_embeds, zero_cond_t, use_additional_t_cond, use_layer3d_rope)
// must be false: Parse refuses them (UNIMPLEMENTED) rather than run a different model.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace ditserve::models::qwenimage {

struct QwenImageTransformerConfig {
  int64_t patch_size = 2;
  int64_t in_channels = 64;   // per token (already packed 2×2 latents)
  int64_t out_channels = 16;  // null in the file → in_channels; proj_out gives patch² × this
  int64_t num_layers = 60;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 3584;
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};
  // Fixed in diffusers (not config keys): RoPE θ, scale_rope, every eps.
  static constexpr double kRopeTheta = 10000.0;
  static constexpr double kEps = 1e-6;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t proj_out_channels() const { return patch_size * patch_size * out_channels; }
};

// INVALID_ARGUMENT naming the key for a wrong type or an inconsistent value (axes_dims_rope not 3
// even widths summing to attention_head_dim, non-positive sizes); UNIMPLEMENTED for a variant.
absl::StatusOr<QwenImageTransformerConfig> ParseQwenImageTransformerConfig(const nlohmann::json& config);

nlohmann::json QwenImageConfigToJson(const QwenImageTransformerConfig& config);

}  // namespace ditserve::models::qwenimage
