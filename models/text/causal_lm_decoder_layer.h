// One decoder layer of a Mistral / Qwen2.5-VL text model (MistralDecoderLayer,
// Qwen2_5_VLDecoderLayer), pre-norm:
//   h = x + self_attn(input_layernorm(x))
//   y = h + down_proj(silu(gate_proj(n)) · up_proj(n)),  n = post_attention_layernorm(h)
// RMSNorms as transformers' (float32 statistics, cast back to the input dtype, times the weight).
// Tensor parallelism: gate/up colwise and down rowwise (one all-reduce), attention as in
// causal_lm_attention.h: two all-reduces per layer.
//
// Thread-safety: immutable after Load; Forward is a collective under tensor parallelism.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/common/linear_layer.h"
#include "models/common/module_loader.h"
#include "models/text/causal_lm_attention.h"
#include "models/text/causal_lm_config.h"
#include "models/text/llm_rope.h"

namespace ditserve::text {

class CausalLmDecoderLayer {
 public:
  // "<prefix>.{input_layernorm, self_attn, post_attention_layernorm, mlp}".
  static absl::StatusOr<CausalLmDecoderLayer> Load(const models::ModuleLoader& loader,
                                                   const std::string& prefix,
                                                   const CausalLmConfig& config, int world_size,
                                                   LlmAttentionImplementation implementation);

  torch::Tensor Forward(const torch::Tensor& x, const LlmRope& rope,
                        const LlmAttendMask& mask) const;

  const CausalLmAttention& attention() const { return *self_attn_; }

 private:
  CausalLmDecoderLayer() = default;
  std::optional<models::DiffusersRmsNorm> input_layernorm_, post_attention_layernorm_;
  std::optional<CausalLmAttention> self_attn_;
  std::shared_ptr<models::LinearLayer> gate_, up_, down_;
};

}  // namespace ditserve::text
