// The tensors of a diffusers FluxTransformer2DModel (FLUX.1-dev / -schnell), derived from its
// config.json: the state dict of diffusers transformer_flux.py, with the guidance embedder iff `guidance_embeds`.
// Config fields and class defaults: patch_size 1, in_channels 64, out_channels (null = in_channels),
// num_layers 19, num_single_layers 38, attention_head_dim 128, num_attention_heads 24,
// joint_attention_dim 4096, pooled_projection_dim 768, guidance_embeds false, axes_dims_rope
// (whose sum must equal attention_head_dim). MLP ratio 4. Torch-free.
//
// Thread-safety: stateless function.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "tools/tiny_model/tensor_spec.h"

namespace ditserve::tiny_model {

// INVALID_ARGUMENT naming the field when the config is inconsistent.
absl::StatusOr<std::vector<TensorSpec>> FluxTransformerTensors(const nlohmann::json& config);

}  // namespace ditserve::tiny_model
