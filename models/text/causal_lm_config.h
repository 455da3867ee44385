// Configuration of the text model of a transformers vision-language checkpoint served as a text
// encoder: Mistral3ForConditionalGeneration (FLUX.2's Mistral Small 3.x; MistralConfig under
// "text_config") or Qwen2_5_VLForConditionalGeneration (Qwen-Image's Qwen2.5-VL; the text fields
// under "text_config" as transformers 5 saves them, or at the top level as older versions did, the
// former winning field by field). Missing fields take the text config class's defaults, as
// from_pretrained would. Both are the same decoder-only network (RMSNorm, GQA attention with
// rotate-half RoPE, SwiGLU MLP); the differences are the flags below.
//
// Refused (INVALID_ARGUMENT naming the field): another class or text model_type, an activation
// other than silu, RoPE scaling other than the default (Qwen's "mrope" is the default RoPE applied
// per M-RoPE section), unknown RoPE parameters, Qwen2.5-VL's sliding-window layers, inconsistent
// sizes. Thread-safety: plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace ditserve::text {

enum class CausalLmFamily {
  kMistral3,   // Mistral3ForConditionalGeneration
  kQwen25Vl,   // Qwen2_5_VLForConditionalGeneration
};

struct CausalLmConfig {
  std::string class_name;  // "Mistral3ForConditionalGeneration" / "Qwen2_5_VLForConditionalGeneration"
  CausalLmFamily family = CausalLmFamily::kMistral3;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  // Mistral: "head_dim" when given (Mistral Small: 128 with hidden 5120 and 32 heads), else
  // hidden_size / heads. Qwen2.5-VL: always hidden_size / heads.
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // Mistral's sliding-window attention: a query attends to the last `sliding_window` positions
  // (itself included); 0 = none (null in config.json, as Mistral Small 3.1 has it).
  int64_t sliding_window = 0;
  // q/k/v projections have biases (Qwen2.5-VL).
  bool attention_bias = false;
  // Qwen2.5-VL's M-RoPE: the (temporal, height, width) widths of the rotary frequencies, summing
  // to head_dim / 2; empty for plain 1-D RoPE (Mistral).
  std::vector<int64_t> mrope_section;
  // Qwen2.5-VL: the <|image_pad|> token (top-level "image_token_id", Qwen2_5_VLConfig's default
  // 151655), which multimodal prompts replace by image embeddings; -1 for Mistral (not read).
  int64_t image_token_id = -1;

  bool uses_mrope() const { return !mrope_section.empty(); }
};

// Parses config.json text. `where` (the file) prefixes every error.
absl::StatusOr<CausalLmConfig> ParseCausalLmConfig(const std::string& json_text,
                                                   const std::string& where = "config.json");
// The same checks on an already parsed object (what ParseCausalLmConfig does after parsing; the
// config fuzzer parses an input once for every parser).
absl::StatusOr<CausalLmConfig> CausalLmConfigFromJson(const nlohmann::json& j,
                                                      const std::string& where = "config.json");
// Reads "<component_dir>/config.json" (or a config.json path) and parses it.
absl::StatusOr<CausalLmConfig> LoadCausalLmConfig(const std::string& path);

}  // namespace ditserve::text
