// Flux2SingleTransformerBlock, diffusers transformer_flux2.py, on the joint [text, image] stream:
//   x + gate · attn((1 + scale)·LN(x) + shift)
// with (shift, scale, gate) the shared single-stream modulation set and attn the fused
// Flux2ParallelSelfAttention (its to_out output already includes the MLP branch). fp16: clip.
// Tensor parallelism: 1 all-reduce per call (attn.to_out). Thread-safety: one forward at a time.
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"
#include "models/common/rope.h"
#include "models/flux2/flux2_modulation.h"
#include "models/flux2/flux2_parallel_self_attention.h"

namespace ditserve::models::flux2 {

class Flux2SingleBlock {
 public:
  static absl::StatusOr<Flux2SingleBlock> Load(const ModuleLoader& loader, const std::string& prefix,
                                               int64_t head_dim, int64_t inner_dim,
                                               int64_t mlp_hidden_dim, double eps);
  torch::Tensor Forward(const torch::Tensor& x, const ModulationSet& mod, const RopeTables& rope) const;
  int64_t local_heads() const { return attn_.local_heads(); }

 private:
  Flux2SingleBlock(Flux2ParallelSelfAttention attn, double eps) : attn_(std::move(attn)), eps_(eps) {}
  Flux2ParallelSelfAttention attn_;
  double eps_;
};

}  // namespace ditserve::models::flux2
