// Qwen-Image double-stream attention (diffusers Attention + QwenDoubleStreamAttnProcessor2_0),
// diffusers transformer_qwenimage.py: image q/k/v = to_q/k/v(x), text q/k/v =
// add_{q,k,v}_proj(context) (all with biases), per-head diffusers RMSNorm (eps 1e-6; norm_q/k
// image, norm_added_q/k text), complex RoPE applied separately (image tables to image q/k, text
// tables to text q/k), joint sequence [text, image], SDPA with the optional boolean key mask, then
// the image part through to_out.0 and the text part through to_add_out. The norm, RoPE and join go
// through JointQkvHeadsFirst (models/common/attention_inputs.h): one fused kernel launch for q, k
// and v on CUDA, diffusers' op sequence elsewhere.
//
// Tensor parallelism: colwise q/k/v and rowwise outputs in Qwen-Image's plan; local heads = q
// width / head_dim; 2 all-reduces per call. Thread-safety: one forward at a time.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/common/joint_projections.h"
#include "models/common/module_loader.h"
#include "models/qwenimage/qwenimage_rope.h"

namespace ditserve::models::qwenimage {

class QwenImageAttention {
 public:
  static absl::StatusOr<QwenImageAttention> Load(const ModuleLoader& loader,
                                                 const std::string& prefix, int64_t head_dim,
                                                 double eps);

  // x: (B, N, D), context: (B, T, D) (both modulated); mask: empty or bool (B, 1, 1, T + N), true =
  // attend. Returns (image output, text output).
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& x,
                                                  const torch::Tensor& context,
                                                  const QwenRopeFreqs& rope,
                                                  const torch::Tensor& mask) const;
  int64_t local_heads() const { return proj_.local_heads(); }

 private:
  explicit QwenImageAttention(JointProjections proj) : proj_(std::move(proj)) {}

  JointProjections proj_;
  std::shared_ptr<DiffusersRmsNorm> norm_q_, norm_k_, norm_added_q_, norm_added_k_;
};

}  // namespace ditserve::models::qwenimage
