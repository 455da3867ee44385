// The config.json fields every transformer of ours shares (FluxTransformer2DModel,
// Flux2Transformer2DModel, QwenImageTransformer2DModel), read and written the same way: the
// patch size, the channels, the depth, the attention heads and the text width. Each family's
// parser (flux1_config.cc, flux2_config.cc, qwenimage_config.cc) reads these first, then its own
// fields and checks.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::models {

// The shared fields; each family's config derives from it and gives diffusers' class defaults in
// its constructor.
struct TransformerSizes {
  int64_t patch_size = 1;
  int64_t in_channels = 0;   // per token
  int64_t out_channels = 0;  // null in the file -> in_channels (Qwen-Image: absent -> 16)
  int64_t num_layers = 0;    // FLUX: the double-stream blocks
  int64_t attention_head_dim = 0;
  int64_t num_attention_heads = 0;
  int64_t joint_attention_dim = 0;  // the text encoder's width
  std::vector<int64_t> axes_dims_rope;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
};

// Reads patch_size, in_channels, out_channels, num_layers, attention_head_dim,
// num_attention_heads and joint_attention_dim of `j` into *c (a key left out keeps *c's default).
// out_channels null or absent: `out_channels_default` (a negative value: in_channels, as
// diffusers' `out_channels or in_channels`). INVALID_ARGUMENT naming the key for a wrong type or a
// non-positive size, and when `j` is no object.
inline absl::Status ReadTransformerSizes(const nlohmann::json& j, int64_t out_channels_default,
                                         TransformerSizes* c) {
  if (!j.is_object()) return absl::InvalidArgumentError("transformer config is not a JSON object");
  RETURN_IF_ERROR(ReadPositiveInt(j, "patch_size", &c->patch_size));
  RETURN_IF_ERROR(ReadPositiveInt(j, "in_channels", &c->in_channels));
  c->out_channels = out_channels_default < 0 ? c->in_channels : out_channels_default;
  RETURN_IF_ERROR(ReadPositiveInt(j, "out_channels", &c->out_channels));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_layers", &c->num_layers));
  RETURN_IF_ERROR(ReadPositiveInt(j, "attention_head_dim", &c->attention_head_dim));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_attention_heads", &c->num_attention_heads));
  return ReadPositiveInt(j, "joint_attention_dim", &c->joint_attention_dim);
}

// The fields of `c` as config.json writes them, under `class_name`; the
// family adds its own keys.
inline nlohmann::json TransformerSizesToJson(const char* class_name, const TransformerSizes& c) {
  return nlohmann::json{{"_class_name", class_name},
                        {"patch_size", c.patch_size},
                        {"in_channels", c.in_channels},
                        {"out_channels", c.out_channels},
                        {"num_layers", c.num_layers},
                        {"attention_head_dim", c.attention_head_dim},
                        {"num_attention_heads", c.num_attention_heads},
                        {"joint_attention_dim", c.joint_attention_dim},
                        {"axes_dims_rope", c.axes_dims_rope}};
}

}  // namespace ditserve::models
