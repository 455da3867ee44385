// T5EncoderModel (transformers): FLUX.1's sequence text encoder (T5 v1.1 XXL at full size).
//
// shared embedding -> N blocks of [RMS-norm -> self-attention (no 1/sqrt(d) scaling, additive
// relative position bias computed by block 0 and reused by all) -> residual, RMS-norm ->
// feed-forward (gated or plain) -> residual] -> final RMS-norm. No attention mask: the FLUX
// pipeline encodes padding tokens too.
//
// Ownership: holds (refcounted) views of the state dict's tensors; the state dict may be dropped
// after Create. Runs in the dtype and on the device of those tensors. Replicated only (rank 0 runs
// it; no tensor parallelism). Thread-safety: immutable after Create; Forward is const and may run
// concurrently.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/text/t5_config.h"
#include "sharding/state_dict.h"

namespace ditserve::text {

class T5EncoderModel {
 public:
  // Tensor names as transformers saves them ("shared.weight", falling back to the tied
  // "encoder.embed_tokens.weight"; "encoder.block.N.layer.{0,1}..."). Errors name the first
  // missing or mis-shaped tensor.
  static absl::StatusOr<T5EncoderModel> Create(const T5Config& config,
                                               const sharding::ShardedStateDict& state);

  // input_ids: (B, S) integer ids in [0, vocab_size). Returns last_hidden_state (B, S, d_model).
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& input_ids) const;

  const T5Config& config() const { return config_; }
  torch::ScalarType dtype() const { return embedding_.scalar_type(); }
  torch::Device device() const { return embedding_.device(); }

 private:
  struct Block {
    torch::Tensor attn_ln_w, q_w, k_w, v_w, o_w;
    torch::Tensor ff_ln_w, wi_0_w, wi_1_w, wo_w;  // wi_1_w only when gated
  };

  T5EncoderModel() = default;
  torch::Tensor Norm(const torch::Tensor& x, const torch::Tensor& w) const;
  torch::Tensor Attention(const Block& blk, const torch::Tensor& x,
                          const torch::Tensor& position_bias) const;
  torch::Tensor FeedForward(const Block& blk, const torch::Tensor& x) const;
  torch::Tensor ForwardUnguarded(const torch::Tensor& input_ids) const;

  T5Config config_;
  torch::Tensor embedding_;
  torch::Tensor relative_attention_bias_;  // (num_buckets, num_heads), from block 0
  std::vector<Block> blocks_;
  torch::Tensor final_ln_w_;
};

}  // namespace ditserve::text
