#include "models/qwenimage/qwenimage_config.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::models::qwenimage {
namespace {

absl::Status Bad(const char* key, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("transformer config: '", key, "' ", what));
}

bool Present(const nlohmann::json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

}  // namespace

absl::StatusOr<QwenImageTransformerConfig> ParseQwenImageTransformerConfig(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("transformer config is not a JSON object");
  QwenImageTransformerConfig c;
  RETURN_IF_ERROR(ReadPositiveInt(j, "patch_size", &c.patch_size));
  RETURN_IF_ERROR(ReadPositiveInt(j, "in_channels", &c.in_channels));
  // Absent: the class default 16; null: `out_channels or in_channels`.
  c.out_channels = j.contains("out_channels") ? c.in_channels : 16;
  RETURN_IF_ERROR(ReadPositiveInt(j, "out_channels", &c.out_channels));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_layers", &c.num_layers));
  RETURN_IF_ERROR(ReadPositiveInt(j, "attention_head_dim", &c.attention_head_dim));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_attention_heads", &c.num_attention_heads));
  RETURN_IF_ERROR(ReadPositiveInt(j, "joint_attention_dim", &c.joint_attention_dim));
  for (const char* flag : {"guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"}) {
    if (!Present(j, flag)) continue;
    if (!j[flag].is_boolean()) return Bad(flag, "must be a boolean");
    if (j[flag].get<bool>()) {
      return absl::UnimplementedError(absl::StrCat(
          "transformer config: '", flag, "' = true (a Qwen-Image variant) is not supported"));
    }
  }
  if (Present(j, "axes_dims_rope")) {
    const auto& a = j["axes_dims_rope"];
    if (!a.is_array()) return Bad("axes_dims_rope", "must be a list");
    c.axes_dims_rope.clear();
    for (const auto& v : a) {
      if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() % 2 != 0) {
        return Bad("axes_dims_rope", "entries must be positive even integers");
      }
      c.axes_dims_rope.push_back(v.get<int64_t>());
    }
  }
  // QwenEmbedRope has exactly three axes (frame, height, width).
  if (c.axes_dims_rope.size() != 3) return Bad("axes_dims_rope", "must have 3 entries (frame, height, width)");
  const int64_t rope_width =
      std::accumulate(c.axes_dims_rope.begin(), c.axes_dims_rope.end(), int64_t{0});
  if (rope_width != c.attention_head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer config: axes_dims_rope [", absl::StrJoin(c.axes_dims_rope, ", "), "] sums to ",
        rope_width, ", not attention_head_dim ", c.attention_head_dim));
  }
  return c;
}

nlohmann::json QwenImageConfigToJson(const QwenImageTransformerConfig& c) {
  return nlohmann::json{{"_class_name", "QwenImageTransformer2DModel"},
                        {"patch_size", c.patch_size},
                        {"in_channels", c.in_channels},
                        {"out_channels", c.out_channels},
                        {"num_layers", c.num_layers},
                        {"attention_head_dim", c.attention_head_dim},
                        {"num_attention_heads", c.num_attention_heads},
                        {"joint_attention_dim", c.joint_attention_dim},
                        {"axes_dims_rope", c.axes_dims_rope},
                        {"guidance_embeds", false},
                        {"zero_cond_t", false},
                        {"use_additional_t_cond", false},
                        {"use_layer3d_rope", false}};
}

}  // namespace ditserve::models::qwenimage
