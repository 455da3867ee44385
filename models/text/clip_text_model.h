// CLIPTextModel (transformers): the text tower FLUX.1 takes its pooled prompt embedding from.
//
// token + position embeddings -> N pre-LayerNorm encoder layers (causal self-attention, MLP)
// -> final_layer_norm. No attention mask: the FLUX pipeline passes none, padding included.
//
// Ownership: holds (refcounted) views of the state dict's tensors; the state dict may be dropped
// after Create. Runs in the dtype and on the device of those tensors. Replicated only (rank 0 runs
// it; no tensor parallelism). Thread-safety: immutable after Create; Forward is const and may run
// concurrently.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/text/clip_text_config.h"
#include "sharding/state_dict.h"

namespace ditserve::text {

struct ClipTextOutput {
  torch::Tensor last_hidden_state;  // (B, S, hidden), after final_layer_norm
  torch::Tensor pooler_output;      // (B, hidden): last_hidden_state at the EOS position
};

class ClipTextModel {
 public:
  // Tensor names as transformers saves them, with or without the "text_model." prefix (both
  // layouts exist on the Hub). Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<ClipTextModel> Create(const ClipTextConfig& config,
                                              const sharding::ShardedStateDict& state);

  // input_ids: (B, S) integer, S <= max_position_embeddings, ids in [0, vocab_size).
  absl::StatusOr<ClipTextOutput> Forward(const torch::Tensor& input_ids) const;

  const ClipTextConfig& config() const { return config_; }
  torch::ScalarType dtype() const { return token_embedding_.scalar_type(); }
  torch::Device device() const { return token_embedding_.device(); }

 private:
  struct Layer {
    torch::Tensor ln1_w, ln1_b, ln2_w, ln2_b;
    torch::Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
    torch::Tensor fc1_w, fc1_b, fc2_w, fc2_b;
  };

  ClipTextModel() = default;
  torch::Tensor LayerForward(const Layer& layer, const torch::Tensor& x,
                             const torch::Tensor& causal) const;
  ClipTextOutput ForwardUnguarded(const torch::Tensor& input_ids) const;

  ClipTextConfig config_;
  torch::Tensor token_embedding_, position_embedding_;
  std::vector<Layer> layers_;
  torch::Tensor final_ln_w_, final_ln_b_;
};

}  // namespace ditserve::text
