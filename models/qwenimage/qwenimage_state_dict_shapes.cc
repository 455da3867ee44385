#include "models/qwenimage/qwenimage_state_dict_shapes.h"

#include "absl/strings/str_cat.h"
#include "models/common/joint_attention_shapes.h"

namespace ditserve::models::qwenimage {

std::map<std::string, std::vector<int64_t>> QwenImageStateDictShapes(
    const QwenImageTransformerConfig& c) {
  const int64_t d = c.inner_dim(), hd = c.attention_head_dim, mlp = 4 * d;
  std::map<std::string, std::vector<int64_t>> s;
  // Every Linear of Qwen-Image has a bias.
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    s[p + ".weight"] = {out, in};
    s[p + ".bias"] = {out};
  };
  linear("img_in", d, c.in_channels);
  s["txt_norm.weight"] = {c.joint_attention_dim};
  linear("txt_in", d, c.joint_attention_dim);
  linear("time_text_embed.timestep_embedder.linear_1", d, 256);
  linear("time_text_embed.timestep_embedder.linear_2", d, d);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = absl::StrCat("transformer_blocks.", i, ".");
    linear(b + "img_mod.1", 6 * d, d);
    linear(b + "txt_mod.1", 6 * d, d);
    AddJointAttentionShapes(b, d, hd, linear, &s);
    for (const char* mlp_name : {"img_mlp", "txt_mlp"}) {
      linear(b + mlp_name + ".net.0.proj", mlp, d);
      linear(b + mlp_name + ".net.2", d, mlp);
    }
  }
  linear("norm_out.linear", 2 * d, d);
  linear("proj_out", c.proj_out_channels(), d);
  return s;
}

}  // namespace ditserve::models::qwenimage
