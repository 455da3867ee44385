#include "models/flux1/flux1_state_dict_shapes.h"

#include "absl/strings/str_cat.h"
#include "models/common/joint_attention_shapes.h"

namespace ditserve::models::flux1 {

std::map<std::string, std::vector<int64_t>> FluxStateDictShapes(const FluxTransformerConfig& c) {
  const int64_t d = c.inner_dim(), hd = c.attention_head_dim, mlp = 4 * d;
  std::map<std::string, std::vector<int64_t>> s;
  // Every Linear of FLUX.1 has a bias.
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    s[p + ".weight"] = {out, in};
    s[p + ".bias"] = {out};
  };
  linear("x_embedder", d, c.in_channels);
  linear("context_embedder", d, c.joint_attention_dim);
  linear("time_text_embed.timestep_embedder.linear_1", d, 256);
  linear("time_text_embed.timestep_embedder.linear_2", d, d);
  if (c.guidance_embeds) {
    linear("time_text_embed.guidance_embedder.linear_1", d, 256);
    linear("time_text_embed.guidance_embedder.linear_2", d, d);
  }
  linear("time_text_embed.text_embedder.linear_1", d, c.pooled_projection_dim);
  linear("time_text_embed.text_embedder.linear_2", d, d);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = absl::StrCat("transformer_blocks.", i, ".");
    linear(b + "norm1.linear", 6 * d, d);
    linear(b + "norm1_context.linear", 6 * d, d);
    AddJointAttentionShapes(b, d, hd, linear, &s);
    linear(b + "ff.net.0.proj", mlp, d);
    linear(b + "ff.net.2", d, mlp);
    linear(b + "ff_context.net.0.proj", mlp, d);
    linear(b + "ff_context.net.2", d, mlp);
  }
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    const std::string b = absl::StrCat("single_transformer_blocks.", i, ".");
    linear(b + "norm.linear", 3 * d, d);
    linear(b + "proj_mlp", mlp, d);
    linear(b + "proj_out", d, d + mlp);
    for (const char* m : {"to_q", "to_k", "to_v"}) linear(b + "attn." + m, d, d);
    for (const char* n : {"norm_q", "norm_k"}) s[b + "attn." + n + ".weight"] = {hd};
  }
  linear("norm_out.linear", 2 * d, d);
  linear("proj_out", c.out_channels, d);
  return s;
}

}  // namespace ditserve::models::flux1
