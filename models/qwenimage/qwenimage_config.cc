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
    bool on = false;
    RETURN_IF_ERROR(ReadBool(j, flag, &on));
    if (on) {
      return absl::UnimplementedError(absl::StrCat(
          "transformer config: '", flag, "' = true (a Qwen-Image variant) is not supported"));
    }
  }
  RETURN_IF_ERROR(ReadPositiveEvenIntList(j, "axes_dims_rope", &c.axes_dims_rope));
  // QwenEmbedRope has exactly three axes (frame, height, width).
  if (c.axes_dims_rope.size() != 3) return Bad("axes_dims_rope", "must have 3 entries (frame, height, width)");
  RETURN_IF_ERROR(CheckAxesDimsRopeSum(c.axes_dims_rope, c.attention_head_dim));
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
