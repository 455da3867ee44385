// Configuration of a transformers T5EncoderModel, read from its config.json. Missing fields take
// transformers' T5Config defaults, as from_pretrained would.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "models/text/activations.h"

namespace ditserve::text {

struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 512;
  int64_t d_kv = 64;
  int64_t d_ff = 2048;
  int64_t num_layers = 6;
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  // From feed_forward_proj: "relu" / "gelu" (plain) or "gated-<act>"; "gated-gelu" means the
  // tanh-approximated gelu_new, as T5Config defines it.
  bool is_gated_act = false;
  Activation dense_act = Activation::kRelu;

  int64_t inner_dim() const { return num_heads * d_kv; }
};

// Parses config.json text; INVALID_ARGUMENT on malformed JSON, bad types or inconsistent sizes.
absl::StatusOr<T5Config> ParseT5Config(const std::string& json_text);
// The same checks on an already parsed object (what ParseT5Config does after parsing; the
// config fuzzer parses an input once for every parser).
absl::StatusOr<T5Config> T5ConfigFromJson(const nlohmann::json& j);
// Reads and parses a config.json file (NOT_FOUND if it cannot be read).
absl::StatusOr<T5Config> LoadT5Config(const std::string& path);

}  // namespace ditserve::text
