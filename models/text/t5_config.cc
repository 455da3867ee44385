#include "models/text/t5_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/config_json.h"

namespace ditserve::text {

absl::StatusOr<T5Config> ParseT5Config(const std::string& json_text) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonObject(json_text));
  return T5ConfigFromJson(j);
}

absl::StatusOr<T5Config> T5ConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("T5 config is not a JSON object");
  T5Config c;
  ASSIGN_OR_RETURN(c.vocab_size, JsonField<int64_t>(j, "vocab_size", c.vocab_size));
  ASSIGN_OR_RETURN(c.d_model, JsonField<int64_t>(j, "d_model", c.d_model));
  ASSIGN_OR_RETURN(c.d_kv, JsonField<int64_t>(j, "d_kv", c.d_kv));
  ASSIGN_OR_RETURN(c.d_ff, JsonField<int64_t>(j, "d_ff", c.d_ff));
  ASSIGN_OR_RETURN(c.num_layers, JsonField<int64_t>(j, "num_layers", c.num_layers));
  ASSIGN_OR_RETURN(c.num_heads, JsonField<int64_t>(j, "num_heads", c.num_heads));
  ASSIGN_OR_RETURN(c.relative_attention_num_buckets,
                   JsonField<int64_t>(j, "relative_attention_num_buckets",
                                      c.relative_attention_num_buckets));
  ASSIGN_OR_RETURN(c.relative_attention_max_distance,
                   JsonField<int64_t>(j, "relative_attention_max_distance",
                                      c.relative_attention_max_distance));
  ASSIGN_OR_RETURN(c.layer_norm_epsilon,
                   JsonField<double>(j, "layer_norm_epsilon", c.layer_norm_epsilon));

  ASSIGN_OR_RETURN(std::string proj, JsonField<std::string>(j, "feed_forward_proj", "relu"));
  std::vector<std::string> parts = absl::StrSplit(proj, '-');
  c.is_gated_act = parts.size() == 2 && parts[0] == "gated";
  if (parts.size() > 2 || (parts.size() == 2 && !c.is_gated_act)) {
    return absl::InvalidArgumentError(
        absl::StrCat("feed_forward_proj '", proj, "' is not '<act>' or 'gated-<act>'"));
  }
  // T5Config's special case: "gated-gelu" (T5 v1.1, the FLUX text encoder) is gelu_new.
  const std::string act = proj == "gated-gelu" ? "gelu_new" : parts.back();
  ASSIGN_OR_RETURN(c.dense_act, ParseActivation(act));

  if (c.vocab_size <= 0 || c.d_model <= 0 || c.d_kv <= 0 || c.d_ff <= 0 || c.num_layers < 0 ||
      c.num_heads <= 0 || c.relative_attention_num_buckets < 4 ||
      c.relative_attention_max_distance <= 0) {
    return absl::InvalidArgumentError(
        "T5 config has a non-positive size (or fewer than 4 relative attention buckets)");
  }
  return c;
}

absl::StatusOr<T5Config> LoadT5Config(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  auto config = ParseT5Config(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace ditserve::text
