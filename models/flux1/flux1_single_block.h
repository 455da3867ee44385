// FluxSingleTransformerBlock, diffusers transformer_flux.py: on the joint [text, image] stream,
// x + gate · proj_out(cat(attn(nx), GELU_tanh(proj_mlp(nx)))), nx = AdaLN-Zero-Single(x).
// Under FLUX.1's plan proj_out is packed rowwise with blocks [D, 4D]: each rank's input is
// [attention_r | mlp_r], which is exactly the local concatenation; one all-reduce per call.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/module_loader.h"
#include "models/common/rope.h"
#include "models/common/flux_attention.h"

namespace ditserve::models::flux1 {

class FluxSingleBlock {
 public:
  static absl::StatusOr<FluxSingleBlock> Load(const ModuleLoader& loader, const std::string& prefix,
                                              int64_t head_dim);
  // x: (B, S, D) joint stream; returns the updated joint stream.
  torch::Tensor Forward(const torch::Tensor& x, const torch::Tensor& temb,
                        const RopeTables& rope) const;

  // The AdaLN module (the model shares its modulation GEMM: models/tp/modulation_bank.h).
  AdaLayerNormZeroSingle& norm() { return norm_; }

 private:
  FluxSingleBlock(AdaLayerNormZeroSingle norm, FluxAttention attn,
                  std::shared_ptr<LinearLayer> proj_mlp, std::shared_ptr<LinearLayer> proj_out)
      : norm_(std::move(norm)),
        attn_(std::move(attn)),
        proj_mlp_(std::move(proj_mlp)),
        proj_out_(std::move(proj_out)) {}
  AdaLayerNormZeroSingle norm_;
  FluxAttention attn_;
  std::shared_ptr<LinearLayer> proj_mlp_, proj_out_;
};

}  // namespace ditserve::models::flux1
