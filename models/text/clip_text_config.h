// Configuration of a transformers CLIPTextModel, read from its config.json. Missing fields take
// transformers' CLIPTextConfig defaults, as from_pretrained would.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "models/text/activations.h"

namespace ditserve::text {

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  double layer_norm_eps = 1e-5;
  Activation hidden_act = Activation::kQuickGelu;
  // 2 selects transformers' legacy pooling (argmax of the ids, i.e. the highest id, which is
  // <|endoftext|> in the OpenAI vocabulary); any other value pools at its first occurrence.
  int64_t eos_token_id = 49407;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

// Parses config.json text; INVALID_ARGUMENT on malformed JSON, bad types or inconsistent sizes.
absl::StatusOr<ClipTextConfig> ParseClipTextConfig(const std::string& json_text);
// The same checks on an already parsed object (what ParseClipTextConfig does after parsing; the
// config fuzzer parses an input once for every parser).
absl::StatusOr<ClipTextConfig> ClipTextConfigFromJson(const nlohmann::json& j);
// Reads and parses a config.json file (NOT_FOUND if it cannot be read).
absl::StatusOr<ClipTextConfig> LoadClipTextConfig(const std::string& path);

}  // namespace ditserve::text
