// QwenImageTransformerBlock, diffusers transformer_qwenimage.py. Per stream s ∈ {img, txt}, with
// its own modulation Linear s_mod.1 (replicated in every plan):
//   mod = s_mod.1(SiLU(temb)) (B, 6D) → halves mod1, mod2 → each (shift, scale, gate)
//   attention on LN(x)·(1 + scale1) + shift1 (both streams jointly), x += gate1 · attn
//   x += gate2 · s_mlp(LN(x)·(1 + scale2) + shift2)       (FeedForward, GELU-tanh)
// LN: no affine, eps 1e-6. fp16 only: both streams clipped to ±65504.
// zero_cond_t (Qwen-Image-Edit-2511; `cond_from` >= 0): temb holds 2B rows, the step's embedding
// then the timestep-0 one; the image stream's tokens [0, cond_from) are modulated by the first
// B rows' img_mod output and the tokens from cond_from on (the input images') by the last B rows'
// (diffusers' modulate_index); the text stream by the first B rows'.
// Tensor parallelism: 4 all-reduces per call (to_out.0, to_add_out, img_mlp.net.2, txt_mlp.net.2).
// Thread-safety: one forward at a time.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/feed_forward.h"
#include "models/common/module_loader.h"
#include "models/qwenimage/qwenimage_attention.h"
#include "models/qwenimage/qwenimage_rope.h"

namespace ditserve::models::qwenimage {

class QwenImageBlock {
 public:
  static absl::StatusOr<QwenImageBlock> Load(const ModuleLoader& loader, const std::string& prefix,
                                             int64_t inner_dim, int64_t head_dim, double eps);
  // Returns the updated (image, text) streams. mask: see QwenImageAttention::Forward. cond_from:
  // -1, or zero_cond_t's first input-image token (see above).
  std::pair<torch::Tensor, torch::Tensor> Forward(
      const torch::Tensor& hidden, const torch::Tensor& context, const torch::Tensor& temb,
      const QwenRopeFreqs& rope, const torch::Tensor& mask, int64_t cond_from = -1) const;
  int64_t local_heads() const { return attn_.local_heads(); }

  // The modulation layers (img_mod.1, txt_mod.1) and where their outputs come from once the model
  // shares one GEMM for all of them (models/tp/modulation_bank.h); unset: each runs its own.
  const std::shared_ptr<LinearLayer>& img_mod() const { return img_mod_; }
  const std::shared_ptr<LinearLayer>& txt_mod() const { return txt_mod_; }
  void set_img_modulation_source(ModulationSource s) { img_source_ = std::move(s); }
  void set_txt_modulation_source(ModulationSource s) { txt_source_ = std::move(s); }

 private:
  QwenImageBlock(std::shared_ptr<LinearLayer> img_mod, std::shared_ptr<LinearLayer> txt_mod,
                 QwenImageAttention attn, FeedForward img_mlp, FeedForward txt_mlp, double eps)
      : img_mod_(std::move(img_mod)),
        txt_mod_(std::move(txt_mod)),
        attn_(std::move(attn)),
        img_mlp_(std::move(img_mlp)),
        txt_mlp_(std::move(txt_mlp)),
        eps_(eps) {}
  std::shared_ptr<LinearLayer> img_mod_, txt_mod_;
  ModulationSource img_source_, txt_source_;
  QwenImageAttention attn_;
  FeedForward img_mlp_, txt_mlp_;
  double eps_;
};

}  // namespace ditserve::models::qwenimage
