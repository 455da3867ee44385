// QwenImageTransformer2DModel's config.json (diffusers transformer_qwenimage.py). Every size comes
// from the file; the defaults are diffusers' class defaults (Qwen-Image), used only for keys the
// file leaves out. zero_cond_t (Qwen-Image-Edit-2511) is read; the other variants' switches
// (guidance_embeds, use_additional_t_cond, use_layer3d_rope) must be false: Parse refuses them
// (UNIMPLEMENTED) rather than run a different model.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "models/common/transformer_config_fields.h"

namespace ditserve::models::qwenimage {

struct QwenImageTransformerConfig : TransformerSizes {
  // diffusers' class defaults: patch_size, in_channels, out_channels, num_layers,
  // attention_head_dim, num_attention_heads, joint_attention_dim, axes_dims_rope.
  QwenImageTransformerConfig() : TransformerSizes{2, 64, 16, 60, 128, 24, 3584, {16, 56, 56}} {}

  // Fixed in diffusers (not config keys): RoPE θ, scale_rope, every eps.
  static constexpr double kRopeTheta = 10000.0;
  static constexpr double kEps = 1e-6;
  // Qwen-Image-Edit-2511: the image stream's tokens after the output's (the input images') are
  // modulated with the timestep-0 embedding (diffusers' modulate_index); the text stream and
  // norm_out keep the step's.
  bool zero_cond_t = false;
  int64_t proj_out_channels() const { return patch_size * patch_size * out_channels; }
};

// INVALID_ARGUMENT naming the key for a wrong type or an inconsistent value (axes_dims_rope not 3
// even widths summing to attention_head_dim, non-positive sizes); UNIMPLEMENTED for a variant
// other than zero_cond_t.
absl::StatusOr<QwenImageTransformerConfig> ParseQwenImageTransformerConfig(const nlohmann::json& config);

nlohmann::json QwenImageConfigToJson(const QwenImageTransformerConfig& config);

}  // namespace ditserve::models::qwenimage
