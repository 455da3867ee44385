// The FLUX.2 text side: the Mistral tokenizer with the chat-template formatting of diffusers'
// Flux2Pipeline (flux2_prompt_format.h) and the Mistral3 text model (models/text/causal_lm_*),
// whose hidden states after layers (10, 20, 30) are stacked per token into the prompt embeddings
// (B, L, 3 * hidden). Prompts are padded on the left to max_sequence_length and every position,
// pads included, goes to the transformer, as diffusers does.
//
// Placement: kSharded loads this rank's tensor-parallel slice of the text model on every rank,
// and Encode is then a collective every rank calls with the same prompts; kRank0 loads a full
// replica on rank 0 only (a single-rank group), and only rank 0 calls Encode.
//
// Ownership: owns the tokenizer and the model; borrows the communicator (sharded), which must
// outlive it. Threads: one Encode at a time, on the rank's engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/text/causal_lm_encoder.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "pipeline/pipeline.h"

namespace ditserve::pipeline {

class Flux2PromptEncoder {
 public:
  // diffusers' Flux2Pipeline default text_encoder_out_layers.
  static constexpr int64_t kHiddenStateLayers[] = {10, 20, 30};

  // `tokenizer_dir` and `text_encoder_dir` of a Flux2Pipeline folder. `comm` is the tensor-parallel
  // group when `sharded`; ignored otherwise (a private single-rank group is used).
  static absl::StatusOr<std::unique_ptr<Flux2PromptEncoder>> Load(
      const std::string& tokenizer_dir, const std::string& text_encoder_dir,
      const PipelineOptions& options, comm::Communicator* comm, bool sharded);

  // The token ids and attention mask (B, max_sequence_length) int64 of `prompts`, formatted with
  // the system message and the chat template, left-padded, truncated on the right.
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Tokenize(
      const std::vector<std::string>& prompts, int64_t max_sequence_length) const;

  // (B, max_sequence_length, 3 * hidden) in the model dtype on its device.
  absl::StatusOr<torch::Tensor> Encode(const std::vector<std::string>& prompts,
                                       int64_t max_sequence_length);

  int64_t embed_width() const;
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  Flux2PromptEncoder(tokenizers::HfTokenizer tokenizer, std::string bos)
      : tokenizer_(std::move(tokenizer)), bos_(std::move(bos)) {}

  tokenizers::HfTokenizer tokenizer_;
  std::string bos_;
  std::unique_ptr<comm::Communicator> own_comm_;  // kRank0: the single-rank group
  std::unique_ptr<text::CausalLmTextEncoder> model_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace ditserve::pipeline
