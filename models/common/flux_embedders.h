// The input side FLUX.1 and FLUX.2 share (diffusers' FluxTransformer2DModel /
// Flux2Transformer2DModel): x_embedder (latent tokens -> inner dim), context_embedder (prompt
// embeddings -> inner dim), and the timestep embedder with the guidance embedder of a
// guidance-distilled model, under the family's `time_prefix` ("time_text_embed" for FLUX.1,
// "time_guidance_embed" for FLUX.2). Every layer is full width on every rank (the TP plans keep
// embedders replicated).
//
// Ownership: the layers share the loader's tensors. Thread-safety: immutable after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"
#include "models/common/module_loader.h"
#include "models/common/timestep_embedding.h"

namespace ditserve::models {

// The named inputs FLUX.1 and FLUX.2 both take (their Forward(map) names).
struct FluxFamilyForwardArgs {
  torch::Tensor hidden_states;          // (B, N, in_channels) latent tokens
  torch::Tensor encoder_hidden_states;  // (B, T, joint_attention_dim)
  torch::Tensor timestep;               // (B,) sigma in [0, 1] (the model multiplies by 1000)
  torch::Tensor img_ids;   // (N, axes): FLUX.1 3 axes (a leading batch dim dropped), FLUX.2 4
  torch::Tensor txt_ids;   // (T, axes), likewise
  torch::Tensor guidance;  // (B,), required iff the model embeds guidance
};

struct FluxEmbedderShape {
  int64_t in_channels = 0;          // per latent token
  int64_t joint_attention_dim = 0;  // the prompt embeddings' width
  int64_t inner_dim = 0;
  std::string time_prefix;    // "time_text_embed", "time_guidance_embed"
  int64_t time_features = 0;  // what the time embedders take (their sinusoidal projection)
  bool guidance_embeds = false;
};

struct FluxEmbedders {
  std::shared_ptr<LinearLayer> x_embedder;
  std::shared_ptr<LinearLayer> context_embedder;
  std::optional<TimestepEmbedding> timestep;
  std::optional<TimestepEmbedding> guidance;  // set iff shape.guidance_embeds

  // INVALID_ARGUMENT naming the layer whose widths differ from `shape`.
  static absl::StatusOr<FluxEmbedders> Load(const ModuleLoader& loader,
                                            const FluxEmbedderShape& shape);
};

}  // namespace ditserve::models
