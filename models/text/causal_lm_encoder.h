// A decoder-only LLM used as a text encoder: the text model of Mistral3ForConditionalGeneration
// (FLUX.2) or Qwen2_5_VLForConditionalGeneration (Qwen-Image), one implementation with the
// per-family flags of CausalLmConfig, built per rank from a ShardedStateDict and a Communicator.
//
// Forward returns hidden states exactly as transformers' `output_hidden_states=True` defines them
// for a text-only forward without a cache: hidden_states[0] = the token embeddings, [i] = the output
// of decoder layer i for 0 < i < N, and [N] (N = num_hidden_layers) = the output of layer N AFTER
// the final RMSNorm (transformers replaces the last layer's output by last_hidden_state). Position
// ids and the causal + padding (+ sliding window) mask follow causal_lm_inputs.h: every position,
// pads included, gets a value (FLUX.2 feeds all 512 to its transformer). Layers past the highest
// requested index are not run.
//
// Tensor names: "<prefix>embed_tokens.weight", "<prefix>layers.<i>....", "<prefix>norm.weight" with
// the prefix the checkpoint uses (sharding::DetectTextModelPrefix: "model.language_model." or the
// older "language_model.model." / "model."). Vision tower, projector and lm_head are never touched.
//
// Tensor parallelism: the built-in plan (sharding::BuiltinTpPlan: q/k/v/gate/up colwise,
// o/down rowwise), 2 all-reduces per layer; the degree must divide both the attention and the
// key/value head counts. Embeddings and norms are replicated; every rank returns the same full
// hidden states. Works in the dtype and on the device of the state dict's tensors.
//
// Ownership: shares the state dict's tensors (the state dict may be dropped after Load); borrows
// the communicator, which must outlive the model. Thread-safety: one Forward at a time; under
// tensor parallelism Forward is a collective every rank of the group calls with the same inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/text/causal_lm_attention.h"
#include "models/text/causal_lm_config.h"
#include "models/text/causal_lm_decoder_layer.h"
#include "sharding/state_dict.h"

namespace ditserve::text {

// A multimodal prompt's inputs beyond the token ids (Qwen2.5-VL, Qwen-Image-Edit), as
// Qwen2VLModel.forward (transformers 5.17) uses them: inputs_embeds = embed_tokens(input_ids), then
// `inputs_embeds.masked_scatter(input_ids == image_token_id, image_embeds)` (the image-token
// positions, row-major over (B, T), take image_embeds' rows in order, cast to the model dtype),
// and the decoder layers' RoPE tables built from `position_ids` instead of the text positions.
struct LlmMultimodalInputs {
  // (N, hidden_size) floating: the vision tower's merged embeddings of every image of the batch,
  // concatenated in prompt order; N must equal the count of config.image_token_id in input_ids
  // (0 rows for a prompt without images). Same values on every rank (computed once, broadcast).
  torch::Tensor image_embeds;
  // (3, B, T) integer: the M-RoPE positions (mrope_position_ids.h: MropePositionIds).
  torch::Tensor position_ids;
};

class CausalLmTextEncoder {
 public:
  // `comm`: the tensor-parallel group the state dict was sliced for (same rank and size; a
  // single-rank communicator for tp 1). Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<std::unique_ptr<CausalLmTextEncoder>> Load(
      const CausalLmConfig& config, const sharding::ShardedStateDict& sd, comm::Communicator* comm,
      LlmAttentionImplementation implementation = LlmAttentionImplementation::kSdpa);

  // input_ids: (B, T) integer ids in [0, vocab_size); attention_mask: (B, T) of 0/1 (any integer
  // or bool dtype; undefined = no padding). `hidden_state_indices`: which hidden_states[k] to
  // return, in that order; k in [-(N+1), N], negative counting from the end as in Python
  // (-1 = the final-normed last one). Each result is (B, T, hidden_size) in the model dtype.
  absl::StatusOr<std::vector<torch::Tensor>> Forward(
      const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
      const std::vector<int64_t>& hidden_state_indices);

  // The same with a multimodal prompt (Qwen2.5-VL only, config.uses_mrope()): hidden_states[0]
  // is the embeddings after the image rows are scattered in. INVALID_ARGUMENT for another family,
  // image_embeds not (N, hidden_size) floating, a count of image tokens other than N (both
  // named), position_ids not (3, B, T) integer. Collective under tensor parallelism, as Forward.
  absl::StatusOr<std::vector<torch::Tensor>> Forward(
      const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
      const std::vector<int64_t>& hidden_state_indices, const LlmMultimodalInputs& multimodal);

  const CausalLmConfig& config() const { return config_; }
  // The tensor-name prefix the model was loaded from ("model.language_model.", ...).
  const std::string& text_model_prefix() const { return prefix_; }
  // N + 1: the number of hidden states transformers returns.
  int64_t num_hidden_states() const { return config_.num_hidden_layers + 1; }
  int64_t local_heads() const;
  int64_t local_kv_heads() const;
  torch::ScalarType dtype() const { return embed_tokens_.scalar_type(); }
  torch::Device device() const { return embed_tokens_.device(); }

 private:
  explicit CausalLmTextEncoder(CausalLmConfig config) : config_(std::move(config)) {}
  absl::Status CheckInputs(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                           const std::vector<int64_t>& indices,
                           std::vector<int64_t>* normalized) const;
  absl::Status CheckMultimodal(const torch::Tensor& input_ids,
                               const LlmMultimodalInputs& multimodal) const;
  // `multimodal`: null for a text-only prompt.
  std::vector<torch::Tensor> ForwardImpl(const torch::Tensor& input_ids,
                                         const torch::Tensor& attention_mask,
                                         const std::vector<int64_t>& indices,
                                         const LlmMultimodalInputs* multimodal) const;

  CausalLmConfig config_;
  std::string prefix_;
  torch::Tensor embed_tokens_;
  std::vector<CausalLmDecoderLayer> layers_;
  std::optional<models::DiffusersRmsNorm> norm_;
};

}  // namespace ditserve::text
