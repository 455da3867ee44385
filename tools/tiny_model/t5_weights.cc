#include "tools/tiny_model/t5_weights.h"

#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/tiny_model/config_fields.h"

namespace ditserve::tiny_model {

absl::StatusOr<std::vector<TensorSpec>> T5EncoderTensors(const nlohmann::json& config) {
  const std::string c = "T5EncoderModel";
  ASSIGN_OR_RETURN(const int64_t vocab, PositiveInt(config, c, "vocab_size"));
  ASSIGN_OR_RETURN(const int64_t d_model, PositiveInt(config, c, "d_model"));
  ASSIGN_OR_RETURN(const int64_t d_kv, PositiveInt(config, c, "d_kv"));
  ASSIGN_OR_RETURN(const int64_t heads, PositiveInt(config, c, "num_heads"));
  ASSIGN_OR_RETURN(const int64_t d_ff, PositiveInt(config, c, "d_ff"));
  ASSIGN_OR_RETURN(const int64_t layers, PositiveInt(config, c, "num_layers"));
  ASSIGN_OR_RETURN(const int64_t buckets, PositiveInt(config, c, "relative_attention_num_buckets"));
  ASSIGN_OR_RETURN(const std::string ff_proj, String(config, c, "feed_forward_proj", "relu"));
  const bool gated = absl::StartsWith(ff_proj, "gated-");

  const int64_t inner = heads * d_kv;
  TensorList t;
  t.Embedding("shared.weight", vocab, d_model, 1.0f);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string b = absl::StrCat("encoder.block.", i, ".layer.");
    t.Linear(b + "0.SelfAttention.q", inner, d_model, /*bias=*/false);
    t.Linear(b + "0.SelfAttention.k", inner, d_model, /*bias=*/false);
    t.Linear(b + "0.SelfAttention.v", inner, d_model, /*bias=*/false);
    t.Linear(b + "0.SelfAttention.o", d_model, inner, /*bias=*/false);
    if (i == 0) {
      t.Embedding(b + "0.SelfAttention.relative_attention_bias.weight", buckets, heads,
                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_model))));
    }
    t.Norm(b + "0.layer_norm", d_model, /*bias=*/false);
    if (gated) {
      t.Linear(b + "1.DenseReluDense.wi_0", d_ff, d_model, /*bias=*/false);
      t.Linear(b + "1.DenseReluDense.wi_1", d_ff, d_model, /*bias=*/false);
    } else {
      t.Linear(b + "1.DenseReluDense.wi", d_ff, d_model, /*bias=*/false);
    }
    t.Linear(b + "1.DenseReluDense.wo", d_model, d_ff, /*bias=*/false);
    t.Norm(b + "1.layer_norm", d_model, /*bias=*/false);
  }
  t.Norm("encoder.final_layer_norm", d_model, /*bias=*/false);
  return t.Release();
}

}  // namespace ditserve::tiny_model
