#include "models/flux2/flux2_config.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/common/transformer_config_fields.h"

namespace ditserve::models::flux2 {
namespace {

absl::Status Bad(const char* key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("transformer config: '", key, "' ", what));
}

}  // namespace

absl::StatusOr<Flux2TransformerConfig> ParseFlux2TransformerConfig(const nlohmann::json& j) {
  Flux2TransformerConfig c;
  RETURN_IF_ERROR(ReadTransformerSizes(j, /*out_channels_default=*/-1, &c));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_single_layers", &c.num_single_layers));
  RETURN_IF_ERROR(ReadPositiveInt(j, "timestep_guidance_channels", &c.timestep_guidance_channels));
  RETURN_IF_ERROR(ReadPositiveDouble(j, "mlp_ratio", &c.mlp_ratio));
  RETURN_IF_ERROR(ReadPositiveDouble(j, "rope_theta", &c.rope_theta));
  RETURN_IF_ERROR(ReadPositiveDouble(j, "eps", &c.eps));
  RETURN_IF_ERROR(ReadBool(j, "guidance_embeds", &c.guidance_embeds));
  RETURN_IF_ERROR(ReadPositiveEvenIntList(j, "axes_dims_rope", &c.axes_dims_rope));
  // x_embedder takes already patchified tokens; diffusers' forward has no patch_size > 1 path.
  if (c.patch_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer config: patch_size ", c.patch_size, " is not supported (only 1)"));
  }
  if (c.timestep_guidance_channels % 2 != 0) {
    return Bad("timestep_guidance_channels", "must be even");
  }
  RETURN_IF_ERROR(CheckAxesDimsRopeSum(c.axes_dims_rope, c.attention_head_dim));
  // The MLP width in double first: a huge ratio would overflow mlp_hidden_dim()'s int64 cast.
  const double mlp_width = static_cast<double>(c.inner_dim()) * c.mlp_ratio;
  if (!(mlp_width < static_cast<double>(kMaxConfigInt) + 1)) {
    return Bad("mlp_ratio", absl::StrCat("gives an MLP of ", mlp_width, " features (at most ",
                                         kMaxConfigInt, ")"));
  }
  if (c.mlp_hidden_dim() <= 0) return Bad("mlp_ratio", "gives an empty MLP");
  return c;
}

nlohmann::json Flux2ConfigToJson(const Flux2TransformerConfig& c) {
  nlohmann::json j = TransformerSizesToJson("Flux2Transformer2DModel", c);
  j["num_single_layers"] = c.num_single_layers;
  j["timestep_guidance_channels"] = c.timestep_guidance_channels;
  j["mlp_ratio"] = c.mlp_ratio;
  j["rope_theta"] = c.rope_theta;
  j["eps"] = c.eps;
  j["guidance_embeds"] = c.guidance_embeds;
  return j;
}

}  // namespace ditserve::models::flux2
