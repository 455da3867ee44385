#include "tools/tiny_model/clip_text_weights.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/tiny_model/config_fields.h"

namespace ditserve::tiny_model {

absl::StatusOr<std::vector<TensorSpec>> ClipTextTensors(const nlohmann::json& config) {
  const std::string c = "CLIPTextModel";
  ASSIGN_OR_RETURN(const int64_t vocab, PositiveInt(config, c, "vocab_size"));
  ASSIGN_OR_RETURN(const int64_t hidden, PositiveInt(config, c, "hidden_size"));
  ASSIGN_OR_RETURN(const int64_t inner, PositiveInt(config, c, "intermediate_size"));
  ASSIGN_OR_RETURN(const int64_t layers, PositiveInt(config, c, "num_hidden_layers"));
  ASSIGN_OR_RETURN(const int64_t heads, PositiveInt(config, c, "num_attention_heads"));
  ASSIGN_OR_RETURN(const int64_t positions, PositiveInt(config, c, "max_position_embeddings"));
  if (hidden % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        c, " config: hidden_size ", hidden, " is not divisible by num_attention_heads ", heads));
  }
  TensorList t;
  t.Embedding("embeddings.token_embedding.weight", vocab, hidden, 0.02f);
  t.Embedding("embeddings.position_embedding.weight", positions, hidden, 0.01f);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = absl::StrCat("encoder.layers.", i, ".");
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      t.Linear(l + "self_attn." + proj, hidden, hidden);
    }
    t.Norm(l + "layer_norm1", hidden);
    t.Norm(l + "layer_norm2", hidden);
    t.Linear(l + "mlp.fc1", inner, hidden);
    t.Linear(l + "mlp.fc2", hidden, inner);
  }
  t.Norm("final_layer_norm", hidden);
  return t.Release();
}

}  // namespace ditserve::tiny_model
