#include "models/flux1/flux1_config.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::models::flux1 {

absl::StatusOr<FluxTransformerConfig> ParseFluxTransformerConfig(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("transformer config is not a JSON object");
  FluxTransformerConfig c;
  RETURN_IF_ERROR(ReadPositiveInt(j, "patch_size", &c.patch_size));
  RETURN_IF_ERROR(ReadPositiveInt(j, "in_channels", &c.in_channels));
  c.out_channels = c.in_channels;
  RETURN_IF_ERROR(ReadPositiveInt(j, "out_channels", &c.out_channels));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_layers", &c.num_layers));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_single_layers", &c.num_single_layers));
  RETURN_IF_ERROR(ReadPositiveInt(j, "attention_head_dim", &c.attention_head_dim));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_attention_heads", &c.num_attention_heads));
  RETURN_IF_ERROR(ReadPositiveInt(j, "joint_attention_dim", &c.joint_attention_dim));
  RETURN_IF_ERROR(ReadPositiveInt(j, "pooled_projection_dim", &c.pooled_projection_dim));
  if (j.contains("guidance_embeds") && !j["guidance_embeds"].is_null()) {
    if (!j["guidance_embeds"].is_boolean()) {
      return absl::InvalidArgumentError("transformer config: 'guidance_embeds' must be a boolean");
    }
    c.guidance_embeds = j["guidance_embeds"].get<bool>();
  }
  if (j.contains("axes_dims_rope") && !j["axes_dims_rope"].is_null()) {
    const auto& a = j["axes_dims_rope"];
    if (!a.is_array() || a.empty()) {
      return absl::InvalidArgumentError("transformer config: 'axes_dims_rope' must be a non-empty list");
    }
    c.axes_dims_rope.clear();
    for (const auto& v : a) {
      if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() % 2 != 0) {
        return absl::InvalidArgumentError(
            "transformer config: 'axes_dims_rope' entries must be positive even integers");
      }
      c.axes_dims_rope.push_back(v.get<int64_t>());
    }
  }
  // The diffusers model only supports patch_size 1 in its forward (x_embedder takes packed tokens).
  if (c.patch_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer config: patch_size ", c.patch_size, " is not supported (only 1)"));
  }
  const int64_t rope_width =
      std::accumulate(c.axes_dims_rope.begin(), c.axes_dims_rope.end(), int64_t{0});
  if (rope_width != c.attention_head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer config: axes_dims_rope [", absl::StrJoin(c.axes_dims_rope, ", "), "] sums to ",
        rope_width, ", not attention_head_dim ", c.attention_head_dim));
  }
  return c;
}

}  // namespace ditserve::models::flux1
