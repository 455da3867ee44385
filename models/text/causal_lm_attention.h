// The self-attention of a Mistral / Qwen2.5-VL decoder layer (MistralAttention,
// Qwen2_5_VLAttention) on this rank's heads:
//   q, k, v = q_proj(x), k_proj(x), v_proj(x)  (biases for Qwen2.5-VL), split into heads,
//   rotate-half RoPE on q and k, every group of heads/kv_heads query heads sharing one key/value
//   head (repeat_kv), softmax(q kᵀ / sqrt(head_dim) + mask) v, o_proj (no bias).
//
// Tensor parallelism (transformers' base_model_tp_plan): q/k/v colwise, so this rank holds query
// heads [r·H/n, (r+1)·H/n) and key/value heads [r·KV/n, (r+1)·KV/n) -- whole GQA groups, which is
// why n must divide both counts; o_proj rowwise (one all-reduce). Replicated layers (tp 1, or no
// plan) hold every head.
//
// Fully masked query rows (left pads): `implementation` says what transformers' attention function
// returns there -- kSdpa (PyTorch >= 2.5 scaled_dot_product_attention, transformers' default):
// zeros; kEager (additive finfo.min mask, float32 softmax): the mean of v over every key. Other rows
// are the same for both. Computed without NaNs on every LibTorch version.
//
// Thread-safety: immutable after Load; Forward is a collective under tensor parallelism.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_layer.h"
#include "models/common/module_loader.h"
#include "models/text/causal_lm_config.h"
#include "models/text/llm_rope.h"

namespace ditserve::text {

enum class LlmAttentionImplementation { kSdpa, kEager };

// The attention mask prepared once per forward for every layer.
struct LlmAttendMask {
  torch::Tensor attend;   // (B, 1, T, T) bool, true = attend; fully masked rows opened up
  torch::Tensor has_key;  // (B, T, 1) bool: false for fully masked query rows
};
// From CausalLmAttendMask's (B, 1, T, T) mask.
LlmAttendMask PrepareAttendMask(const torch::Tensor& attend);

class CausalLmAttention {
 public:
  // "<prefix>.{q,k,v,o}_proj". INVALID_ARGUMENT when the widths on this rank do not fit the
  // config at the loader's tensor-parallel degree (naming the module and both widths).
  static absl::StatusOr<CausalLmAttention> Load(const models::ModuleLoader& loader,
                                                const std::string& prefix,
                                                const CausalLmConfig& config, int world_size,
                                                LlmAttentionImplementation implementation);

  // x: (B, T, hidden) -> (B, T, hidden), all-reduced under tensor parallelism.
  torch::Tensor Forward(const torch::Tensor& x, const LlmRope& rope,
                        const LlmAttendMask& mask) const;

  int64_t local_heads() const { return local_heads_; }
  int64_t local_kv_heads() const { return local_kv_heads_; }

 private:
  CausalLmAttention() = default;
  std::shared_ptr<models::LinearLayer> q_, k_, v_, o_;
  int64_t head_dim_ = 0, local_heads_ = 0, local_kv_heads_ = 0;
  LlmAttentionImplementation implementation_ = LlmAttentionImplementation::kSdpa;
};

}  // namespace ditserve::text
