// FluxTransformer2DModel (diffusers transformer_flux.py), built per rank from a
// ShardedStateDict and a Communicator: every linear layer takes the style the state dict's plan
// gives it (models/tp), local heads = q rows / head_dim. Works in any floating dtype the state
// dict holds (float32, bfloat16) on the device its tensors are on.
//
// Forward under tensor parallelism is a collective (see models/transformer.h); FLUX.1's plan makes
// it 4 all-reduces per double block + 1 per single block. Thread-safety: one Forward at a time.
// Ownership: borrows the communicator (must outlive the model); shares the state dict's tensors.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/common/rope.h"
#include "models/common/text_projection.h"
#include "models/flux1/flux1_config.h"
#include "models/flux1/flux1_double_block.h"
#include "models/flux1/flux1_single_block.h"
#include "models/flux_family_transformer.h"
#include "sharding/state_dict.h"

namespace ditserve::models::flux1 {

// FLUX.1's inputs: the family's, and the pooled CLIP embedding.
struct FluxForwardArgs : FluxFamilyForwardArgs {
  torch::Tensor pooled_projections;  // (B, pooled_projection_dim)
};

class FluxTransformer2DModel
    : public FluxFamilyTransformer<FluxTransformer2DModel, FluxTransformerConfig, FluxForwardArgs,
                                   FluxDoubleBlock, FluxSingleBlock> {
 private:
  friend DiffusionTransformerBase;  // Load constructs it; the stages
  friend FluxFamilyTransformer;     // the blocks' calls
  explicit FluxTransformer2DModel(FluxTransformerConfig config);
  absl::Status LoadLayers(const ModuleLoader& loader, comm::Communicator* comm) override;
  absl::Status CheckArgs(const FluxForwardArgs& args) const override;

  // A pass's state between the stages (models/transformer_base.h): the streams, the conditioning
  // embedding every block's AdaLN reads, the RoPE tables of [text, image].
  struct Pass {
    torch::Tensor h, context, temb;
    RopeTables rope;
  };
  Pass Prologue(const FluxForwardArgs& args) const;
  std::pair<torch::Tensor, torch::Tensor> RunDouble(const FluxDoubleBlock& block,
                                                    const torch::Tensor& h,
                                                    const torch::Tensor& context,
                                                    const Pass& pass) const;
  torch::Tensor RunSingle(const FluxSingleBlock& block, const torch::Tensor& x,
                          const Pass& pass) const;

  std::optional<PixArtAlphaTextProjection> text_embedder_;  // the pooled CLIP projection
};

}  // namespace ditserve::models::flux1
