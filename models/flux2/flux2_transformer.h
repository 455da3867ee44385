// Flux2Transformer2DModel (diffusers transformer_flux2.py), built per rank from a
// ShardedStateDict and a Communicator: every linear layer takes the style the state dict's plan
// gives it (models/tp; FLUX.2's plan includes the packed SwiGLU / fused single-stream styles),
// local heads = q rows / head_dim. Works in any floating dtype the state dict holds (float32,
// bfloat16) on the device its tensors are on.
//
// Forward arguments (names as diffusers'): hidden_states (B, N, in_channels), encoder_hidden_states
// (B, T, joint_attention_dim), timestep (B,) σ in [0, 1] (the model multiplies by 1000 in its
// dtype), img_ids (N, n_axes) or (B, N, n_axes) and txt_ids (T, n_axes) or (B, T, n_axes) (3-D:
// row 0 is used, as diffusers does), guidance (B,) raw scale, required iff guidance_embeds
// (accepted and ignored otherwise). Output: (B, N, out_channels).
//
// Forward under tensor parallelism is a collective (models/transformer.h): 4 all-reduces per double
// block + 1 per single block. Thread-safety: one Forward at a time. Ownership: borrows the
// communicator (must outlive the model); shares the state dict's tensors.
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
#include "models/flux2/flux2_config.h"
#include "models/flux2/flux2_double_block.h"
#include "models/flux2/flux2_modulation.h"
#include "models/flux2/flux2_single_block.h"
#include "models/flux_family_transformer.h"
#include "sharding/state_dict.h"

namespace ditserve::models::flux2 {

// FLUX.2's inputs are the family's (ids with 4 axes; (B, N, 4) ids are accepted too).
using Flux2ForwardArgs = FluxFamilyForwardArgs;

class Flux2Transformer2DModel
    : public FluxFamilyTransformer<Flux2Transformer2DModel, Flux2TransformerConfig,
                                   Flux2ForwardArgs, Flux2DoubleBlock, Flux2SingleBlock> {
 private:
  friend DiffusionTransformerBase;  // Load constructs it; the stages
  friend FluxFamilyTransformer;     // the blocks' calls
  explicit Flux2Transformer2DModel(Flux2TransformerConfig config);
  absl::Status LoadLayers(const ModuleLoader& loader, comm::Communicator* comm) override;
  absl::Status CheckArgs(const Flux2ForwardArgs& args) const override;

  // A pass's state between the stages (models/transformer_base.h): the streams, the time
  // embedding (norm_out's), the shared modulations the blocks read, RoPE of [text, image].
  struct Pass {
    torch::Tensor h, context, temb;
    std::vector<ModulationSet> mod_img, mod_txt, mod_single;
    RopeTables rope;
  };
  Pass Prologue(const Flux2ForwardArgs& args) const;
  std::pair<torch::Tensor, torch::Tensor> RunDouble(const Flux2DoubleBlock& block,
                                                    const torch::Tensor& h,
                                                    const torch::Tensor& context,
                                                    const Pass& pass) const;
  torch::Tensor RunSingle(const Flux2SingleBlock& block, const torch::Tensor& x,
                          const Pass& pass) const;

  // The blocks' shared modulations (one GEMM with norm_out's, modulation_bank.h).
  std::optional<Flux2Modulation> mod_img_, mod_txt_, mod_single_;
};

}  // namespace ditserve::models::flux2
