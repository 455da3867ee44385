#include "models/flux1/flux1_config.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/common/transformer_config_fields.h"

namespace ditserve::models::flux1 {

absl::StatusOr<FluxTransformerConfig> ParseFluxTransformerConfig(const nlohmann::json& j) {
  FluxTransformerConfig c;
  RETURN_IF_ERROR(ReadTransformerSizes(j, /*out_channels_default=*/-1, &c));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_single_layers", &c.num_single_layers));
  RETURN_IF_ERROR(ReadPositiveInt(j, "pooled_projection_dim", &c.pooled_projection_dim));
  RETURN_IF_ERROR(ReadBool(j, "guidance_embeds", &c.guidance_embeds));
  RETURN_IF_ERROR(ReadPositiveEvenIntList(j, "axes_dims_rope", &c.axes_dims_rope));
  // The diffusers model only supports patch_size 1 in its forward (x_embedder takes packed tokens).
  if (c.patch_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer config: patch_size ", c.patch_size, " is not supported (only 1)"));
  }
  RETURN_IF_ERROR(CheckAxesDimsRopeSum(c.axes_dims_rope, c.attention_head_dim));
  return c;
}

}  // namespace ditserve::models::flux1
