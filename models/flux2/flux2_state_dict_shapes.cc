#include "models/flux2/flux2_state_dict_shapes.h"

#include "absl/strings/str_cat.h"
#include "models/common/joint_attention_shapes.h"

namespace ditserve::models::flux2 {

std::map<std::string, std::vector<int64_t>> Flux2StateDictShapes(const Flux2TransformerConfig& c) {
  const int64_t d = c.inner_dim(), hd = c.attention_head_dim, mh = c.mlp_hidden_dim();
  std::map<std::string, std::vector<int64_t>> s;
  // Every Linear of FLUX.2 is bias-free.
  auto linear = [&](const std::string& p, int64_t out, int64_t in) { s[p + ".weight"] = {out, in}; };
  linear("x_embedder", d, c.in_channels);
  linear("context_embedder", d, c.joint_attention_dim);
  linear("time_guidance_embed.timestep_embedder.linear_1", d, c.timestep_guidance_channels);
  linear("time_guidance_embed.timestep_embedder.linear_2", d, d);
  if (c.guidance_embeds) {
    linear("time_guidance_embed.guidance_embedder.linear_1", d, c.timestep_guidance_channels);
    linear("time_guidance_embed.guidance_embedder.linear_2", d, d);
  }
  linear("double_stream_modulation_img.linear", 6 * d, d);
  linear("double_stream_modulation_txt.linear", 6 * d, d);
  linear("single_stream_modulation.linear", 3 * d, d);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = absl::StrCat("transformer_blocks.", i, ".");
    AddJointAttentionShapes(b, d, hd, linear, &s);
    for (const char* ff : {"ff", "ff_context"}) {
      linear(b + ff + ".linear_in", 2 * mh, d);
      linear(b + ff + ".linear_out", d, mh);
    }
  }
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    const std::string b = absl::StrCat("single_transformer_blocks.", i, ".attn.");
    linear(b + "to_qkv_mlp_proj", 3 * d + 2 * mh, d);
    linear(b + "to_out", d, d + mh);
    for (const char* n : {"norm_q", "norm_k"}) s[b + n + ".weight"] = {hd};
  }
  linear("norm_out.linear", 2 * d, d);
  linear("proj_out", c.patch_size * c.patch_size * c.out_channels, d);
  return s;
}

}  // namespace ditserve::models::flux2
