#include "tools/tiny_model/flux_transformer_weights.h"

#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/tiny_model/config_fields.h"

namespace ditserve::tiny_model {

absl::StatusOr<std::vector<TensorSpec>> FluxTransformerTensors(const nlohmann::json& config) {
  const std::string c = "FluxTransformer2DModel";
  ASSIGN_OR_RETURN(const int64_t patch, PositiveInt(config, c, "patch_size", 1));
  ASSIGN_OR_RETURN(const int64_t in_channels, PositiveInt(config, c, "in_channels", 64));
  ASSIGN_OR_RETURN(const int64_t out_channels, PositiveInt(config, c, "out_channels", in_channels));
  ASSIGN_OR_RETURN(const int64_t layers, PositiveInt(config, c, "num_layers", 19));
  ASSIGN_OR_RETURN(const int64_t single_layers, PositiveInt(config, c, "num_single_layers", 38));
  ASSIGN_OR_RETURN(const int64_t head_dim, PositiveInt(config, c, "attention_head_dim", 128));
  ASSIGN_OR_RETURN(const int64_t heads, PositiveInt(config, c, "num_attention_heads", 24));
  ASSIGN_OR_RETURN(const int64_t joint_dim, PositiveInt(config, c, "joint_attention_dim", 4096));
  ASSIGN_OR_RETURN(const int64_t pooled_dim, PositiveInt(config, c, "pooled_projection_dim", 768));
  ASSIGN_OR_RETURN(const bool guidance, Bool(config, c, "guidance_embeds", false));
  ASSIGN_OR_RETURN(const std::vector<int64_t> axes, PositiveIntList(config, c, "axes_dims_rope"));
  const int64_t axes_sum = std::accumulate(axes.begin(), axes.end(), int64_t{0});
  if (axes_sum != head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        c, " config: \"axes_dims_rope\" must sum to attention_head_dim (", head_dim, "), got ",
        axes_sum));
  }
  for (int64_t a : axes) {
    if (a % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(c, " config: \"axes_dims_rope\" entries must be even (RoPE pairs)"));
    }
  }

  const int64_t d = heads * head_dim;
  const int64_t mlp = 4 * d;
  constexpr int64_t kTimestepChannels = 256;  // the sinusoidal projection's width
  TensorList t;
  t.Linear("x_embedder", d, in_channels);
  t.Linear("context_embedder", d, joint_dim);
  t.Linear("time_text_embed.timestep_embedder.linear_1", d, kTimestepChannels);
  t.Linear("time_text_embed.timestep_embedder.linear_2", d, d);
  if (guidance) {
    t.Linear("time_text_embed.guidance_embedder.linear_1", d, kTimestepChannels);
    t.Linear("time_text_embed.guidance_embedder.linear_2", d, d);
  }
  t.Linear("time_text_embed.text_embedder.linear_1", d, pooled_dim);
  t.Linear("time_text_embed.text_embedder.linear_2", d, d);

  for (int64_t i = 0; i < layers; ++i) {
    const std::string b = absl::StrCat("transformer_blocks.", i, ".");
    t.Linear(b + "norm1.linear", 6 * d, d);
    t.Linear(b + "norm1_context.linear", 6 * d, d);
    for (const char* proj : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
                             "to_out.0", "to_add_out"}) {
      t.Linear(b + "attn." + proj, d, d);
    }
    for (const char* norm : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"}) {
      t.Norm(b + "attn." + norm, head_dim, /*bias=*/false);
    }
    for (const char* ff : {"ff", "ff_context"}) {
      t.Linear(b + ff + ".net.0.proj", mlp, d);
      t.Linear(b + ff + ".net.2", d, mlp);
    }
  }
  for (int64_t j = 0; j < single_layers; ++j) {
    const std::string b = absl::StrCat("single_transformer_blocks.", j, ".");
    t.Linear(b + "norm.linear", 3 * d, d);
    t.Linear(b + "proj_mlp", mlp, d);
    t.Linear(b + "proj_out", d, d + mlp);
    for (const char* proj : {"to_q", "to_k", "to_v"}) t.Linear(b + "attn." + proj, d, d);
    for (const char* norm : {"norm_q", "norm_k"}) {
      t.Norm(b + "attn." + norm, head_dim, /*bias=*/false);
    }
  }
  t.Linear("norm_out.linear", 2 * d, d);
  t.Linear("proj_out", patch * patch * out_channels, d);
  return t.Release();
}

}  // namespace ditserve::tiny_model
