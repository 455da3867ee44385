#include "models/text/t5_encoder_model.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/text/input_ids.h"
#include "models/text/t5_relative_position.h"

namespace ditserve::text {

absl::StatusOr<T5EncoderModel> T5EncoderModel::Create(const T5Config& config,
                                                      const sharding::ShardedStateDict& state) {
  const int64_t d = config.d_model, inner = config.inner_dim(), ff = config.d_ff;
  T5EncoderModel m;
  m.config_ = config;
  const char* embedding_name =
      !state.Contains("shared.weight") && state.Contains("encoder.embed_tokens.weight")
          ? "encoder.embed_tokens.weight"
          : "shared.weight";
  ASSIGN_OR_RETURN(m.embedding_, state.GetWithShape(embedding_name, {config.vocab_size, d}));
  if (config.num_layers > 0) {
    ASSIGN_OR_RETURN(m.relative_attention_bias_,
                     state.GetWithShape("encoder.block.0.layer.0.SelfAttention.relative_attention_bias"
                                   ".weight",
                                   {config.relative_attention_num_buckets, config.num_heads}));
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string a = absl::StrCat("encoder.block.", i, ".layer.0.");
    const std::string f = absl::StrCat("encoder.block.", i, ".layer.1.");
    Block b;
    ASSIGN_OR_RETURN(b.attn_ln_w, state.GetWithShape(a + "layer_norm.weight", {d}));
    ASSIGN_OR_RETURN(b.q_w, state.GetWithShape(a + "SelfAttention.q.weight", {inner, d}));
    ASSIGN_OR_RETURN(b.k_w, state.GetWithShape(a + "SelfAttention.k.weight", {inner, d}));
    ASSIGN_OR_RETURN(b.v_w, state.GetWithShape(a + "SelfAttention.v.weight", {inner, d}));
    ASSIGN_OR_RETURN(b.o_w, state.GetWithShape(a + "SelfAttention.o.weight", {d, inner}));
    ASSIGN_OR_RETURN(b.ff_ln_w, state.GetWithShape(f + "layer_norm.weight", {d}));
    if (config.is_gated_act) {
      ASSIGN_OR_RETURN(b.wi_0_w, state.GetWithShape(f + "DenseReluDense.wi_0.weight", {ff, d}));
      ASSIGN_OR_RETURN(b.wi_1_w, state.GetWithShape(f + "DenseReluDense.wi_1.weight", {ff, d}));
    } else {
      ASSIGN_OR_RETURN(b.wi_0_w, state.GetWithShape(f + "DenseReluDense.wi.weight", {ff, d}));
    }
    ASSIGN_OR_RETURN(b.wo_w, state.GetWithShape(f + "DenseReluDense.wo.weight", {d, ff}));
    m.blocks_.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(m.final_ln_w_, state.GetWithShape("encoder.final_layer_norm.weight", {d}));
  return m;
}

// T5LayerNorm: RMS over the last dim with the variance in float32 and no mean subtraction; for
// half-precision weights the normalised value is cast to the weight dtype before the scale.
torch::Tensor T5EncoderModel::Norm(const torch::Tensor& x, const torch::Tensor& w) const {
  auto variance = x.to(torch::kFloat).pow(2).mean(-1, /*keepdim=*/true);
  auto y = x * torch::rsqrt(variance + config_.layer_norm_epsilon);
  if (w.scalar_type() == torch::kHalf || w.scalar_type() == torch::kBFloat16) {
    y = y.to(w.scalar_type());
  }
  return w * y;
}

torch::Tensor T5EncoderModel::Attention(const Block& blk, const torch::Tensor& x,
                                        const torch::Tensor& position_bias) const {
  const int64_t b = x.size(0), s = x.size(1);
  auto split = [&](const torch::Tensor& t) {
    return t.view({b, s, config_.num_heads, config_.d_kv}).transpose(1, 2);
  };
  auto q = split(torch::linear(x, blk.q_w));
  auto k = split(torch::linear(x, blk.k_w));
  auto v = split(torch::linear(x, blk.v_w));
  // T5 folds the 1/sqrt(d) scale into its initialisation: raw dot products, plus the bias.
  auto scores = torch::matmul(q, k.transpose(-2, -1)) + position_bias;
  auto probs = torch::softmax(scores.to(torch::kFloat), -1).to(scores.scalar_type());
  auto out = torch::matmul(probs, v).transpose(1, 2).reshape({b, s, config_.inner_dim()});
  return torch::linear(out, blk.o_w);
}

torch::Tensor T5EncoderModel::FeedForward(const Block& blk, const torch::Tensor& x) const {
  auto h = Apply(config_.dense_act, torch::linear(x, blk.wi_0_w));
  if (config_.is_gated_act) h = h * torch::linear(x, blk.wi_1_w);
  if (h.scalar_type() != blk.wo_w.scalar_type()) h = h.to(blk.wo_w.scalar_type());
  return torch::linear(h, blk.wo_w);
}

namespace {

// transformers clamps T5 activations only in float16 (they overflow there); a no-op otherwise.
torch::Tensor ClampIfHalf(const torch::Tensor& x) {
  if (x.scalar_type() != torch::kHalf) return x;
  const double max = 65504.0;
  const double limit = x.isinf().any().item<bool>() ? max - 1000.0 : max;
  return x.clamp(-limit, limit);
}

}  // namespace

torch::Tensor T5EncoderModel::ForwardUnguarded(const torch::Tensor& input_ids) const {
  torch::NoGradGuard no_grad;
  const auto ids = input_ids.to(device(), torch::kLong);
  const int64_t s = ids.size(1);

  auto x = torch::embedding(embedding_, ids);
  torch::Tensor position_bias;
  if (!blocks_.empty()) {
    auto buckets = T5BidirectionalBuckets(s, s, config_.relative_attention_num_buckets,
                                          config_.relative_attention_max_distance, device());
    // (s, s, heads) -> (1, heads, s, s)
    position_bias = torch::embedding(relative_attention_bias_, buckets).permute({2, 0, 1})
                        .unsqueeze(0);
  }
  for (const Block& blk : blocks_) {
    x = ClampIfHalf(x + Attention(blk, Norm(x, blk.attn_ln_w), position_bias));
    x = ClampIfHalf(x + FeedForward(blk, Norm(x, blk.ff_ln_w)));
  }
  return Norm(x, final_ln_w_);
}

absl::StatusOr<torch::Tensor> T5EncoderModel::Forward(const torch::Tensor& input_ids) const {
  RETURN_IF_ERROR(ValidateInputIds(input_ids, config_.vocab_size, /*max_len=*/0, "T5"));
  return GuardTorch("T5EncoderModel forward", [&] { return ForwardUnguarded(input_ids); });
}

}  // namespace ditserve::text
