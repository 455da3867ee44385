// The interface every linear layer of a model implements: a plain replicated Linear
// (models/common/linear.h) or a tensor-parallel one (models/tp/). Model code holds LinearLayers and
// never knows which style a layer has: the plan decides, through a ModuleLoader.
//
// Forward throws (c10::Error, or StatusError for a failed collective); model entry points catch
// with GuardTorch (common/torch_guard.h). Thread-safety: Forward is const but a
// tensor-parallel layer drives its Communicator, so one thread at a time per model.
//
// LoRA: a layer may carry low-rank terms for the current request (models/lora/): Forward then adds
// Σ (x_local · Aᵀ) · Bᵀ beside the GEMM, where A and B are this rank's slices (lora/lora_adapter.h)
// and each B already holds its adapter's scale. A rowwise layer adds its partial delta before the
// all-reduce, so every layer keeps exactly the communication it has without adapters. With no
// terms set Forward is the unadapted code path, bit for bit. SetLoraTerms / ClearLoraTerms are
// called on the model's thread between forwards (lora::LoraLibrary's activation scope).
//
// FP8 (models/common/fp8_linear.h, `--weights fp8`): QuantizeToFp8, called by the loader right
// after a layer is built, replaces this rank's weight by float8 e4m3 + per-output-channel scales;
// weight() is then the FP8 tensor (same shape), fp8_scale() its scales, and the GEMM is the FP8
// one. LoRA terms still add in the model dtype beside it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "sharding/tp_style.h"

namespace ditserve::models {

// One low-rank term of a layer on this rank: delta = (x_local · aᵀ) · bᵀ, a (r, local in),
// b (local out, r), in the layer's dtype and device, the adapter's scale folded into b.
struct LoraTerm {
  torch::Tensor a;
  torch::Tensor b;
};

class LinearLayer {
 public:
  virtual ~LinearLayer() = default;

  // FP8 weights: the per-output-channel scales (undefined while the weight is in the model dtype).
  const torch::Tensor& fp8_scale() const { return fp8_scale_; }
  bool is_fp8() const { return fp8_scale_.defined(); }
  // Quantizes this rank's weight (QuantizeWeightFp8) and releases the model-dtype bytes, also for
  // every other handle sharing the tensor (the state dict's). False, and nothing changes, when the
  // shape does not suit the FP8 GEMM (Fp8Shape) or the layer is FP8 already. Throws where FP8 is
  // not compiled in (the loader checks CheckFp8Supported first). At load, before any fusing.
  bool QuantizeToFp8();

  // The low-rank terms Forward adds until cleared (an empty vector clears).
  void SetLoraTerms(std::vector<LoraTerm> terms) { lora_ = std::move(terms); }
  void ClearLoraTerms() { lora_.clear(); }
  bool has_lora() const { return !lora_.empty(); }
  const std::vector<LoraTerm>& lora_terms() const { return lora_; }

  // y = x · Wᵀ + b with this layer's tensor-parallel semantics (see models/tp/).
  virtual torch::Tensor Forward(const torch::Tensor& x) const = 0;

  // Forward(torch::cat(parts, -1)) — the parts are this rank's input split on the last dim, all
  // with the same leading dims — up to the rounding of partial sums. A layer whose weight is in
  // the model dtype and that has no LoRA terms never builds the joined input: one GEMM per part on
  // its block of the weight's columns, accumulating into y (beta = 1), with the layer's own
  // communication once at the end (FLUX.1's single blocks: the attention and the MLP go straight
  // into proj_out). Otherwise, and for rowwise_split_input, the join then Forward.
  virtual torch::Tensor ForwardJoined(const std::vector<torch::Tensor>& parts) const;

  // Width of the last dim this rank feeds in, and of the output this rank gets back (local widths:
  // a colwise layer's output and a rowwise layer's input are this rank's shard).
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  virtual sharding::TpStyle style() const = 0;
  // Packed styles: this rank's block sizes along the sliced dim (output for packed colwise, input
  // for packed rowwise); empty otherwise.
  virtual std::vector<int64_t> local_blocks() const { return {}; }
  virtual const torch::Tensor& weight() const = 0;
  // This rank's bias (undefined when the layer has none). For a rowwise layer it is the full bias,
  // added once after the reduction.
  virtual const torch::Tensor& bias() const = 0;

  // y += Σ (x_local · aᵀ) · bᵀ over the terms, in place (y may be a view); nothing without terms.
  // For implementations and for fused callers (FusedLinear) that run the GEMM themselves.
  // The second GEMM accumulates straight into y (addmm_, beta = 1): no delta tensor, one pass
  // over y. y must be viewable as (rows, out): contiguous, or a last-dim slice of a contiguous
  // tensor (FusedLinear's parts).
  void AddLoraDelta(const torch::Tensor& x_local, torch::Tensor& y) const {
    if (lora_.empty()) return;
    const torch::Tensor x2 = x_local.reshape({-1, x_local.size(-1)});
    torch::Tensor y2 = y.view({-1, y.size(-1)});
    for (const LoraTerm& t : lora_) y2.addmm_(torch::mm(x2, t.a.t()), t.b.t());
  }

 protected:
  // x · Wᵀ + bias with the weight as stored: torch::linear, or the FP8 GEMM (bias may be undefined).
  torch::Tensor Gemm(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) const;
  // Σ_i parts[i] · W[:, block i]ᵀ (+ bias, in the first GEMM's epilogue), the blocks in order with
  // the parts' widths; undefined where ForwardJoined must join instead (an FP8 weight, LoRA terms,
  // fewer than two parts, widths that do not add up to the weight's columns).
  torch::Tensor BlockGemms(const std::vector<torch::Tensor>& parts, const torch::Tensor& weight,
                           const torch::Tensor& bias) const;
  // The implementation's weight member, for QuantizeToFp8.
  virtual torch::Tensor& mutable_weight() = 0;

 private:
  std::vector<LoraTerm> lora_;
  torch::Tensor fp8_scale_;
};

// True for styles whose Forward is a plain local x · Wᵀ + b with no communication (replicated,
// colwise, packed colwise): such layers may be fused or given a GEMM epilogue.
inline bool IsLocalLinear(const LinearLayer& layer) {
  return !sharding::IsRowwise(layer.style());
}

}  // namespace ditserve::models
