// The tensors of a transformers CLIPTextModel (FLUX.1 `text_encoder/`), derived from its
// config.json (vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// max_position_embeddings), named as transformers 5 saves them (no "text_model." prefix):
// embeddings.{token,position}_embedding.weight, encoder.layers.N.{self_attn.{q,k,v,out}_proj,
// layer_norm1, layer_norm2, mlp.fc1, mlp.fc2}, final_layer_norm. Torch-free.
//
// Embeddings are N(0, 0.02²) (tokens) and N(0, 0.01²) (positions), as CLIP initialises them.
// Thread-safety: stateless function.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "tools/tiny_model/tensor_spec.h"

namespace ditserve::tiny_model {

absl::StatusOr<std::vector<TensorSpec>> ClipTextTensors(const nlohmann::json& config);

}  // namespace ditserve::tiny_model
