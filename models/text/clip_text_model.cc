#include "models/text/clip_text_model.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/text/input_ids.h"

namespace ditserve::text {

absl::StatusOr<ClipTextModel> ClipTextModel::Create(const ClipTextConfig& config,
                                                    const sharding::ShardedStateDict& state) {
  const std::string prefix =
      state.Contains("text_model.embeddings.token_embedding.weight") ? "text_model." : "";
  const int64_t d = config.hidden_size;
  const int64_t f = config.intermediate_size;
  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    return state.GetWithShape(prefix + name, shape);
  };

  ClipTextModel m;
  m.config_ = config;
  ASSIGN_OR_RETURN(m.token_embedding_,
                   get("embeddings.token_embedding.weight", {config.vocab_size, d}));
  ASSIGN_OR_RETURN(m.position_embedding_, get("embeddings.position_embedding.weight",
                                              {config.max_position_embeddings, d}));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("encoder.layers.", i, ".");
    Layer l;
    ASSIGN_OR_RETURN(l.ln1_w, get(p + "layer_norm1.weight", {d}));
    ASSIGN_OR_RETURN(l.ln1_b, get(p + "layer_norm1.bias", {d}));
    ASSIGN_OR_RETURN(l.ln2_w, get(p + "layer_norm2.weight", {d}));
    ASSIGN_OR_RETURN(l.ln2_b, get(p + "layer_norm2.bias", {d}));
    ASSIGN_OR_RETURN(l.q_w, get(p + "self_attn.q_proj.weight", {d, d}));
    ASSIGN_OR_RETURN(l.q_b, get(p + "self_attn.q_proj.bias", {d}));
    ASSIGN_OR_RETURN(l.k_w, get(p + "self_attn.k_proj.weight", {d, d}));
    ASSIGN_OR_RETURN(l.k_b, get(p + "self_attn.k_proj.bias", {d}));
    ASSIGN_OR_RETURN(l.v_w, get(p + "self_attn.v_proj.weight", {d, d}));
    ASSIGN_OR_RETURN(l.v_b, get(p + "self_attn.v_proj.bias", {d}));
    ASSIGN_OR_RETURN(l.out_w, get(p + "self_attn.out_proj.weight", {d, d}));
    ASSIGN_OR_RETURN(l.out_b, get(p + "self_attn.out_proj.bias", {d}));
    ASSIGN_OR_RETURN(l.fc1_w, get(p + "mlp.fc1.weight", {f, d}));
    ASSIGN_OR_RETURN(l.fc1_b, get(p + "mlp.fc1.bias", {f}));
    ASSIGN_OR_RETURN(l.fc2_w, get(p + "mlp.fc2.weight", {d, f}));
    ASSIGN_OR_RETURN(l.fc2_b, get(p + "mlp.fc2.bias", {d}));
    m.layers_.push_back(std::move(l));
  }
  ASSIGN_OR_RETURN(m.final_ln_w_, get("final_layer_norm.weight", {d}));
  ASSIGN_OR_RETURN(m.final_ln_b_, get("final_layer_norm.bias", {d}));
  return m;
}

torch::Tensor ClipTextModel::LayerForward(const Layer& l, const torch::Tensor& x,
                                          const torch::Tensor& causal) const {
  const int64_t b = x.size(0), s = x.size(1);
  const int64_t heads = config_.num_attention_heads, hd = config_.head_dim();
  const double eps = config_.layer_norm_eps;
  auto split = [&](const torch::Tensor& t) { return t.view({b, s, heads, hd}).transpose(1, 2); };

  auto h = torch::layer_norm(x, {config_.hidden_size}, l.ln1_w, l.ln1_b, eps);
  auto q = split(torch::linear(h, l.q_w, l.q_b));
  auto k = split(torch::linear(h, l.k_w, l.k_b));
  auto v = split(torch::linear(h, l.v_w, l.v_b));
  auto attn = compat::ScaledDotProductAttention(q, k, v, causal);
  attn = attn.transpose(1, 2).reshape({b, s, config_.hidden_size});
  auto y = x + torch::linear(attn, l.out_w, l.out_b);

  h = torch::layer_norm(y, {config_.hidden_size}, l.ln2_w, l.ln2_b, eps);
  h = torch::linear(Apply(config_.hidden_act, torch::linear(h, l.fc1_w, l.fc1_b)), l.fc2_w,
                    l.fc2_b);
  return y + h;
}

ClipTextOutput ClipTextModel::ForwardUnguarded(const torch::Tensor& input_ids) const {
  torch::NoGradGuard no_grad;
  const auto ids = input_ids.to(device(), torch::kLong);
  const int64_t b = ids.size(0), s = ids.size(1);

  auto x = torch::embedding(token_embedding_, ids) +
           position_embedding_.slice(0, 0, s).unsqueeze(0);
  // Boolean causal mask, true = attend: query i sees keys 0..i.
  auto causal = torch::ones({s, s}, torch::TensorOptions().dtype(torch::kBool).device(device()))
                    .tril();
  for (const Layer& l : layers_) x = LayerForward(l, x, causal);
  x = torch::layer_norm(x, {config_.hidden_size}, final_ln_w_, final_ln_b_,
                        config_.layer_norm_eps);

  // transformers' pooling rule: eos_token_id == 2 is the legacy configuration, whose EOS is the
  // highest id of the vocabulary, so it takes argmax(ids); otherwise the first EOS occurrence.
  // argmax returns the first maximal index in both cases.
  torch::Tensor eos_pos = config_.eos_token_id == 2
                              ? ids.argmax(-1)
                              : ids.eq(config_.eos_token_id).to(torch::kInt).argmax(-1);
  auto rows = torch::arange(b, torch::TensorOptions().dtype(torch::kLong).device(device()));
  ClipTextOutput out;
  out.pooler_output = x.index({rows, eos_pos});
  out.last_hidden_state = std::move(x);
  return out;
}

absl::StatusOr<ClipTextOutput> ClipTextModel::Forward(const torch::Tensor& input_ids) const {
  RETURN_IF_ERROR(ValidateInputIds(input_ids, config_.vocab_size,
                                   config_.max_position_embeddings, "CLIP"));
  return GuardTorch("CLIPTextModel forward", [&] { return ForwardUnguarded(input_ids); });
}

}  // namespace ditserve::text
