// The FLUX.1 text side, held by rank 0 only: CLIP (pooled embedding of `prompt`) and T5 (sequence
// embedding of `prompt_2`), with their tokenizers, loaded from a FluxPipeline folder. Encoders run
// without an attention mask and T5 sees the padded sequence, as diffusers does (diffusers
// pipeline_flux.py). Threads: one call at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/text/clip_text_model.h"
#include "models/text/t5_encoder_model.h"
#include "models/tokenizers/clip_tokenizer.h"
#include "models/tokenizers/t5_tokenizer.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

struct Flux1PromptEmbeds {
  torch::Tensor prompt_embeds;         // (B, max_sequence_length, joint_attention_dim)
  torch::Tensor pooled_prompt_embeds;  // (B, pooled_projection_dim)
};

class Flux1PromptEncoder {
 public:
  static absl::StatusOr<std::unique_ptr<Flux1PromptEncoder>> Load(
      const sharding::PipelineIndex& index, torch::Device device, torch::ScalarType dtype,
      uint64_t staging_buffer_bytes);

  // prompts[i] goes to CLIP, prompts_2[i] to T5 (same length).
  absl::StatusOr<Flux1PromptEmbeds> Encode(const std::vector<std::string>& prompts,
                                           const std::vector<std::string>& prompts_2,
                                           int max_sequence_length) const;

  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  Flux1PromptEncoder(tokenizers::ClipTokenizer clip_tok, tokenizers::T5Tokenizer t5_tok,
                     text::ClipTextModel clip, text::T5EncoderModel t5)
      : clip_tok_(std::move(clip_tok)),
        t5_tok_(std::move(t5_tok)),
        clip_(std::move(clip)),
        t5_(std::move(t5)) {}

  tokenizers::ClipTokenizer clip_tok_;
  tokenizers::T5Tokenizer t5_tok_;
  text::ClipTextModel clip_;
  text::T5EncoderModel t5_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace ditserve::pipeline
