// FLUX.1 attention (diffusers FluxAttention + FluxAttnProcessor), diffusers transformer_flux.py, which FLUX.2's
// double-stream attention (Flux2Attention + Flux2AttnProcessor, diffusers transformer_flux2.py) repeats exactly:
// one class serves both.
//
// Image stream: to_q/k/v → per-head torch RMSNorm (norm_q/k) → ... ; with a text stream (double
// blocks) the text q/k/v come from add_{q,k,v}_proj with norm_added_q/k and are concatenated in
// front: [text, image]. RoPE on q and k over the whole sequence, SDPA, then — double blocks only —
// the image part through to_out.0 and the text part through to_add_out. Single blocks
// (pre_only) return the attention output itself, (B, S, local heads · hd).
//
// Tensor parallelism: the projections are whatever the plan makes them (colwise in FLUX.1's); the
// local head count is the q weight's rows / head_dim, so nothing else changes per rank. q, k and v
// (and the text stream's three) run as one GEMM each (FusedLinear).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/joint_projections.h"
#include "models/common/module_loader.h"
#include "models/common/rms_norm.h"
#include "models/common/rope.h"

namespace ditserve::models {

class FluxAttention {
 public:
  // `joint`: double-block attention (text projections and output projections present).
  // `qk_norm_eps`: the eps of the per-head q/k RMSNorms (1e-6 in FLUX.1 and FLUX.2).
  static absl::StatusOr<FluxAttention> Load(const ModuleLoader& loader, const std::string& prefix,
                                            int64_t head_dim, bool joint, double qk_norm_eps = 1e-6);

  // Double block: returns (image output, text output), each projected. x: (B, N, D) normed image
  // stream, context: (B, T, D) normed text stream.
  std::pair<torch::Tensor, torch::Tensor> ForwardJoint(const torch::Tensor& x,
                                                       const torch::Tensor& context,
                                                       const RopeTables& rope) const;
  // Single block: x is the joint (B, S, D) stream; returns (B, S, local heads · hd), unprojected
  // (the single block projects it together with its MLP branch).
  torch::Tensor ForwardSingle(const torch::Tensor& x, const RopeTables& rope) const;

  int64_t local_heads() const { return proj_.local_heads(); }

 private:
  explicit FluxAttention(JointProjections proj) : proj_(std::move(proj)) {}

  JointProjections proj_;
  std::shared_ptr<TorchRmsNorm> norm_q_, norm_k_;
  // Joint attention only:
  std::shared_ptr<TorchRmsNorm> norm_added_q_, norm_added_k_;
};

// Per-head q/k RMSNorm at `path`, checked to have head_dim elements.
absl::StatusOr<std::shared_ptr<TorchRmsNorm>> LoadQkNorm(const ModuleLoader& loader,
                                                         const std::string& path, int64_t head_dim,
                                                         double eps);

}  // namespace ditserve::models
