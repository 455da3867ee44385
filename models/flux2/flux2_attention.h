// FLUX.2 double-stream attention (diffusers Flux2Attention + Flux2AttnProcessor), SPEC §2.2 step 5:
// image q/k/v = to_q/k/v(x), text q/k/v = add_{q,k,v}_proj(context), per-head torch RMSNorm
// (norm_q/k on image, norm_added_q/k on text, eps from the config) before RoPE, joint sequence
// [text, image], RoPE over all of it, SDPA without a mask, then the image part through to_out.0
// and the text part through to_add_out. No biases in FLUX.2 (none are read if absent).
//
// Tensor parallelism: the projections are whatever the plan makes them (colwise q/k/v, rowwise
// outputs in FLUX.2's): the local head count is the q width / head_dim, and each rowwise output
// projection all-reduces once. Thread-safety: one forward at a time (layers may communicate).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"
#include "models/common/rms_norm.h"
#include "models/common/rope.h"

namespace ditserve::models::flux2 {

class Flux2Attention {
 public:
  static absl::StatusOr<Flux2Attention> Load(const ModuleLoader& loader, const std::string& prefix,
                                             int64_t head_dim, double eps);

  // x: (B, N, D) modulated image stream, context: (B, T, D) modulated text stream; rope covers
  // the T + N joint positions ([text, image]). Returns (image output, text output), (B, ·, D).
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& x,
                                                  const torch::Tensor& context,
                                                  const RopeTables& rope) const;
  int64_t local_heads() const { return local_heads_; }

 private:
  Flux2Attention() = default;
  torch::Tensor Heads(const torch::Tensor& t) const;  // (B, S, w) → (B, S, local heads, hd)

  int64_t head_dim_ = 0;
  int64_t local_heads_ = 0;
  std::shared_ptr<LinearLayer> to_q_, to_k_, to_v_, add_q_, add_k_, add_v_, to_out_, to_add_out_;
  std::shared_ptr<TorchRmsNorm> norm_q_, norm_k_, norm_added_q_, norm_added_k_;
};

// Per-head QK RMSNorm at `path`, checked to have head_dim elements (shared by the FLUX.2 blocks).
absl::StatusOr<std::shared_ptr<TorchRmsNorm>> LoadQkNorm(const ModuleLoader& loader,
                                                         const std::string& path, int64_t head_dim,
                                                         double eps);

}  // namespace ditserve::models::flux2
