#include "models/text/clip_text_config.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/config_json.h"

namespace ditserve::text {

absl::StatusOr<ClipTextConfig> ParseClipTextConfig(const std::string& json_text) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonObject(json_text));
  return ClipTextConfigFromJson(j);
}

absl::StatusOr<ClipTextConfig> ClipTextConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("CLIP config is not a JSON object");
  ClipTextConfig c;
  ASSIGN_OR_RETURN(c.vocab_size, JsonField<int64_t>(j, "vocab_size", c.vocab_size));
  ASSIGN_OR_RETURN(c.hidden_size, JsonField<int64_t>(j, "hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.intermediate_size,
                   JsonField<int64_t>(j, "intermediate_size", c.intermediate_size));
  ASSIGN_OR_RETURN(c.num_hidden_layers,
                   JsonField<int64_t>(j, "num_hidden_layers", c.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads,
                   JsonField<int64_t>(j, "num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   JsonField<int64_t>(j, "max_position_embeddings", c.max_position_embeddings));
  ASSIGN_OR_RETURN(c.layer_norm_eps, JsonField<double>(j, "layer_norm_eps", c.layer_norm_eps));
  ASSIGN_OR_RETURN(c.eos_token_id, JsonField<int64_t>(j, "eos_token_id", c.eos_token_id));
  ASSIGN_OR_RETURN(std::string act, JsonField<std::string>(j, "hidden_act", "quick_gelu"));
  ASSIGN_OR_RETURN(c.hidden_act, ParseActivation(act));

  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 ||
      c.num_hidden_layers < 0 || c.num_attention_heads <= 0 || c.max_position_embeddings <= 0) {
    return absl::InvalidArgumentError("CLIP config has a non-positive size");
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("CLIP hidden_size ", c.hidden_size,
                                                   " is not divisible by num_attention_heads ",
                                                   c.num_attention_heads));
  }
  return c;
}

absl::StatusOr<ClipTextConfig> LoadClipTextConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  auto config = ParseClipTextConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace ditserve::text
