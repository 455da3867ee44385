// Configuration of the vision tower of Qwen2_5_VLForConditionalGeneration: transformers'
// Qwen2_5_VLVisionConfig, the "vision_config" object of a Qwen-Image pipeline's
// text_encoder/config.json (the same file the language model's CausalLmConfig comes from).
//
// Fields and defaults (transformers 5.17.0):
//   required: depth, hidden_size, intermediate_size, num_heads, out_hidden_size. The class has
//     defaults for them, but those describe no released tower (hidden_size 3584 where Qwen2.5-VL's
//     is 1280), so a config without them could only fail later on the weights' shapes; here it
//     fails naming the field.
//   optional, with the class defaults: in_channels 3, patch_size 14, temporal_patch_size 2,
//     spatial_merge_size 2, window_size 112, fullatt_block_indexes [7, 15, 23, 31],
//     hidden_act "silu" (any activations.h name), rope_parameters.rope_theta 10000.
//   ignored (as by the model): tokens_per_second (video M-RoPE, the language model's concern),
//     initializer_range, "in_chans" / "spatial_patch_size" (older configs' names, which the class
//     never read: in_channels keeps its default 3).
// fullatt_block_indexes is a membership list, as transformers' `layer_num in
// fullatt_block_indexes`: an index outside [0, depth) selects no layer.
//
// Refused (INVALID_ARGUMENT "<file>: field 'vision_config.<name>' ..."): a missing or non-object
// vision_config, a missing required field, any field of the wrong JSON type or non-positive, a
// top-level model_type other than qwen2_5_vl, a vision model_type other than qwen2_5_vl_vision /
// qwen2_5_vl, a rope_type other than "axial" / "default" or an unknown rope parameter, hidden_size
// not divisible by num_heads, a head_dim not divisible by 4 (the 2-D rotary embedding gives each of
// h and w a quarter of it) and window_size < spatial_merge_size * patch_size (transformers'
// `window_size // spatial_merge_size // patch_size` would be 0 merged tokens per window).
//
// Thread-safety: plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "models/text/activations.h"

namespace ditserve::text {

struct Qwen25VlVisionConfig {
  int64_t depth = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_heads = 0;
  int64_t out_hidden_size = 0;
  int64_t in_channels = 3;
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t window_size = 112;
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  Activation hidden_act = Activation::kSilu;
  double rope_theta = 10000.0;

  int64_t head_dim() const { return hidden_size / num_heads; }
  // Patches merged into one output token (spatial_merge_size²).
  int64_t spatial_merge_unit() const { return spatial_merge_size * spatial_merge_size; }
  // Width of one row of pixel_values: in_channels * temporal_patch_size * patch_size².
  int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  // transformers' vit_merger_window_size: a window's side in merged tokens.
  int64_t merger_window_size() const { return window_size / spatial_merge_size / patch_size; }
  // Whether block `layer` attends over whole frames (else within windows).
  bool IsFullAttentionBlock(int64_t layer) const;
};

// Parses a Qwen2.5-VL config.json's text (the whole file; the tower's fields are read from its
// "vision_config"). `where` (the file) prefixes every error.
absl::StatusOr<Qwen25VlVisionConfig> ParseQwen25VlVisionConfig(
    const std::string& json_text, const std::string& where = "config.json");
// The same checks on an already parsed object (what ParseQwen25VlVisionConfig does after parsing;
// the config fuzzer parses an input once for every parser).
absl::StatusOr<Qwen25VlVisionConfig> Qwen25VlVisionConfigFromJson(
    const nlohmann::json& j, const std::string& where = "config.json");
// Reads "<component_dir>/config.json" (or a config.json path) and parses it.
absl::StatusOr<Qwen25VlVisionConfig> LoadQwen25VlVisionConfig(const std::string& path);

}  // namespace ditserve::text
