// FLUX.2 single-stream fused attention + MLP (diffusers Flux2ParallelSelfAttention and its
// processor), diffusers transformer_flux2.py: z = to_qkv_mlp_proj(x) laid out [Q | K | V | gate | value];
// q, k, v → per-head torch RMSNorm on q, k → RoPE → SDPA → (B, S, D); m = silu(gate) · value;
// out = to_out(cat([attention, m])).
//
// Tensor parallelism (FLUX.2's plan): to_qkv_mlp_proj is PackedColwiseParallel with blocks
// [D, D, D, Mh, Mh], so this rank's z is [q_r | k_r | v_r | gate_r | value_r] and is split by the
// local block sizes (ShardingOf(path).local_blocks); to_out is PackedRowwiseParallel [D, Mh] and
// takes [attention_r | m_r] (one all-reduce). Replicated: the full sizes from the config. Load
// refuses plain colwise / rowwise styles for these two, which would slice straight across the
// blocks and still run (diffusers hooks/tensor_parallel.py). Thread-safety: one forward at a time.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"
#include "models/common/rms_norm.h"
#include "models/common/rope.h"

namespace ditserve::models::flux2 {

class Flux2ParallelSelfAttention {
 public:
  // `inner_dim` D and `mlp_hidden_dim` Mh are the full (unsharded) sizes from the config.
  static absl::StatusOr<Flux2ParallelSelfAttention> Load(const ModuleLoader& loader,
                                                         const std::string& prefix, int64_t head_dim,
                                                         int64_t inner_dim, int64_t mlp_hidden_dim,
                                                         double eps);
  // x: (B, S, D) modulated joint stream; returns to_out's full (B, S, D) output.
  torch::Tensor Forward(const torch::Tensor& x, const RopeTables& rope) const;

  int64_t local_heads() const { return local_qkv_ / head_dim_; }

 private:
  Flux2ParallelSelfAttention() = default;
  torch::Tensor Heads(const torch::Tensor& t) const;

  int64_t head_dim_ = 0;
  int64_t local_qkv_ = 0;  // local width of each of Q, K, V
  int64_t local_mlp_ = 0;  // local width of each of gate, value
  std::shared_ptr<LinearLayer> to_qkv_mlp_proj_, to_out_;
  std::shared_ptr<TorchRmsNorm> norm_q_, norm_k_;
};

}  // namespace ditserve::models::flux2
