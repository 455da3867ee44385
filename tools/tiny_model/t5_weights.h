// The tensors of a transformers T5EncoderModel (FLUX.1 `text_encoder_2/`), derived from its
// config.json (vocab_size, d_model, d_kv, num_heads, d_ff, num_layers,
// relative_attention_num_buckets, feed_forward_proj), named as transformers 5 saves them:
// shared.weight (the tied encoder.embed_tokens is not stored), encoder.block.N.layer.0.
// {SelfAttention.{q,k,v,o}, layer_norm}, relative_attention_bias in block 0 only,
// encoder.block.N.layer.1.{DenseReluDense.{wi_0,wi_1,wo} (gated) or {wi,wo}, layer_norm},
// encoder.final_layer_norm. No biases (T5 has none). Torch-free.
//
// shared.weight ~ N(0, 1) as T5 initialises it; relative_attention_bias ~ N(0, 1/d_model).
// Thread-safety: stateless function.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "tools/tiny_model/tensor_spec.h"

namespace ditserve::tiny_model {

absl::StatusOr<std::vector<TensorSpec>> T5EncoderTensors(const nlohmann::json& config);

}  // namespace ditserve::tiny_model
