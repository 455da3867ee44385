#include "models/qwenimage/qwenimage_config.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/common/transformer_config_fields.h"

namespace ditserve::models::qwenimage {
namespace {

absl::Status Bad(const char* key, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("transformer config: '", key, "' ", what));
}

}  // namespace

absl::StatusOr<QwenImageTransformerConfig> ParseQwenImageTransformerConfig(
    const nlohmann::json& j) {
  QwenImageTransformerConfig c;
  // out_channels absent: the class default 16; null: `out_channels or in_channels`.
  const bool has_out_channels = j.is_object() && j.contains("out_channels");
  RETURN_IF_ERROR(ReadTransformerSizes(j, has_out_channels ? -1 : 16, &c));
  RETURN_IF_ERROR(ReadBool(j, "zero_cond_t", &c.zero_cond_t));
  for (const char* flag : {"guidance_embeds", "use_additional_t_cond", "use_layer3d_rope"}) {
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
  nlohmann::json j = TransformerSizesToJson("QwenImageTransformer2DModel", c);
  for (const char* flag : {"guidance_embeds", "use_additional_t_cond", "use_layer3d_rope"}) {
    j[flag] = false;
  }
  j["zero_cond_t"] = c.zero_cond_t;
  return j;
}

}  // namespace ditserve::models::qwenimage
