// The linear projections of a FLUX-style attention (FLUX.1, FLUX.2, Qwen-Image): the image
// stream's q/k/v (to_q, to_k, to_v) as one fused GEMM and, for joint (double-stream) attention, the
// text stream's q/k/v (add_q_proj, add_k_proj, add_v_proj) as another, plus the two output
// projections (to_out.0, to_add_out). The per-model parts (q/k norms, RoPE, masks) stay with each
// model's attention.
//
// Load checks that the six q/k/v projections agree on their local width (this rank's heads ·
// head_dim, whatever the plan made of them) and that the output projections take that width.
// Thread-safety: immutable after Load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/fused_linear.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

struct QkvViews {
  torch::Tensor q, k, v;  // (B, S, local heads, head_dim) views of one GEMM result
};

class JointProjections {
 public:
  // `joint`: also load the text stream's q/k/v and both output projections.
  static absl::StatusOr<JointProjections> Load(const ModuleLoader& loader, const std::string& prefix,
                                               int64_t head_dim, bool joint);

  QkvViews Image(const torch::Tensor& x) const { return Split(*image_qkv_, x); }
  QkvViews Text(const torch::Tensor& context) const { return Split(*text_qkv_, context); }
  // Joint attention output (B, T + N, width) with the text first → (image, text) projected.
  std::pair<torch::Tensor, torch::Tensor> Project(const torch::Tensor& out, int64_t text_len) const;

  int64_t local_heads() const { return local_heads_; }
  int64_t width() const { return local_heads_ * head_dim_; }

 private:
  JointProjections() = default;
  QkvViews Split(const FusedLinear& qkv, const torch::Tensor& x) const;

  int64_t head_dim_ = 0, local_heads_ = 0;
  std::shared_ptr<FusedLinear> image_qkv_, text_qkv_;
  std::shared_ptr<LinearLayer> to_out_, to_add_out_;
};

}  // namespace ditserve::models
