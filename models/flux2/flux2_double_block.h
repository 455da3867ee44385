// Flux2TransformerBlock, diffusers transformer_flux2.py: a FLUX.1-style double-stream block whose modulation
// comes from the model's shared Flux2Modulation tensors (no per-block AdaLN Linear):
//   h += gate_msa · attn_img,  h += gate_mlp · ff((1 + scale_mlp)·LN(h) + shift_mlp)
//   c likewise with the text sets and ff_context; attention input (1 + scale_msa)·LN(·) + shift_msa.
// LN: no affine, config eps. fp16 only: c clipped to ±65504.
// Tensor parallelism: 4 all-reduces per call (to_out.0, to_add_out, ff.linear_out,
// ff_context.linear_out). Thread-safety: one forward at a time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"
#include "models/common/rope.h"
#include "models/common/swiglu_feed_forward.h"
#include "models/common/flux_attention.h"
#include "models/flux2/flux2_modulation.h"

namespace ditserve::models::flux2 {

class Flux2DoubleBlock {
 public:
  static absl::StatusOr<Flux2DoubleBlock> Load(const ModuleLoader& loader, const std::string& prefix,
                                               int64_t head_dim, double eps);
  // mod_img / mod_txt: the two (msa, mlp) sets of the shared double-stream modulation.
  // Returns the updated (image, text) streams.
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& hidden,
                                                  const torch::Tensor& context,
                                                  const std::vector<ModulationSet>& mod_img,
                                                  const std::vector<ModulationSet>& mod_txt,
                                                  const RopeTables& rope) const;
  int64_t local_heads() const { return attn_.local_heads(); }

 private:
  Flux2DoubleBlock(FluxAttention attn, SwiGluFeedForward ff, SwiGluFeedForward ff_context, double eps)
      : attn_(std::move(attn)), ff_(std::move(ff)), ff_context_(std::move(ff_context)), eps_(eps) {}
  FluxAttention attn_;
  SwiGluFeedForward ff_, ff_context_;
  double eps_;
};

}  // namespace ditserve::models::flux2
