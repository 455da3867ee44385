// FluxTransformerBlock (double-stream block), diffusers transformer_flux.py: separate AdaLN-Zero modulation,
// attention and feed-forward for the image stream (norm1, ff) and the text stream (norm1_context,
// ff_context), joint attention over [text, image]. Four all-reduces per call under FLUX.1's plan
// (to_out.0, to_add_out, ff.net.2, ff_context.net.2).
#pragma once

#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/feed_forward.h"
#include "models/common/module_loader.h"
#include "models/common/rope.h"
#include "models/common/flux_attention.h"

namespace ditserve::models::flux1 {

class FluxDoubleBlock {
 public:
  static absl::StatusOr<FluxDoubleBlock> Load(const ModuleLoader& loader, const std::string& prefix,
                                              int64_t head_dim);
  // Updates (hidden, context) in place of the caller's variables: returns (hidden, context).
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& hidden,
                                                  const torch::Tensor& context,
                                                  const torch::Tensor& temb,
                                                  const RopeTables& rope) const;

  // The AdaLN modules (the model shares their modulation GEMM: models/tp/modulation_bank.h).
  AdaLayerNormZero& norm1() { return norm1_; }
  AdaLayerNormZero& norm1_context() { return norm1_context_; }

 private:
  FluxDoubleBlock(AdaLayerNormZero norm1, AdaLayerNormZero norm1_context, FluxAttention attn,
                  FeedForward ff, FeedForward ff_context)
      : norm1_(std::move(norm1)),
        norm1_context_(std::move(norm1_context)),
        attn_(std::move(attn)),
        ff_(std::move(ff)),
        ff_context_(std::move(ff_context)) {}
  AdaLayerNormZero norm1_, norm1_context_;
  FluxAttention attn_;
  FeedForward ff_, ff_context_;
};

}  // namespace ditserve::models::flux1
