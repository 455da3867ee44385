// LlmTextPipeline<Encoder>: a DiffusionPipeline whose text side is one decoder-only LLM encoder
// (FLUX.2: Mistral, Flux2PromptEncoder; Qwen-Image: Qwen2.5-VL's language model,
// QwenImagePromptEncoder). It owns that encoder and implements the LoadTextSide hook for it:
// PlaceLlmTextEncoder decides on every rank alike where the encoder lives (sharded over the
// ranks, or on rank 0; nowhere when the folder has no text_encoder + tokenizer), then
// Encoder::Load(tokenizer dir, text encoder dir, options, comm, sharded) runs on the ranks that
// hold it (bytes counted), and the width of its prompt embeddings must be the transformer's
// joint_attention_dim (FAILED_PRECONDITION naming both otherwise).
//
// Encoder: a class with static Load(const std::string& tokenizer_dir, const std::string&
// text_encoder_dir, const PipelineOptions&, comm::Communicator*, bool sharded) ->
// StatusOr<std::unique_ptr<Encoder>> and weight_bytes() const.
//
// Contract: text_site() is valid on every rank after LoadTextSide; text_encoder() only where
// text_site().HeldBy(rank). Same threading as DiffusionPipeline (one job at a time).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pipeline/component_loading.h"
#include "pipeline/diffusion_pipeline.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

template <typename Encoder>
class LlmTextPipeline : public DiffusionPipeline {
 protected:
  // `width`: the encoder's prompt-embedding width; `width_name`: how the error message names it.
  LlmTextPipeline(const PipelineFamily& family, int64_t (Encoder::*width)() const,
                  const char* width_name)
      : DiffusionPipeline(family), width_(width), width_name_(width_name) {}

  absl::Status LoadTextSide(const sharding::PipelineIndex* index,
                            const PipelineOptions& options) override {
    LlmTextEncoderSite& site = text_.site;
    ASSIGN_OR_RETURN(site, PlaceLlmTextEncoder(index, options, comm()));
    if (!site.HeldBy(comm().rank())) return absl::OkStatus();
    ASSIGN_OR_RETURN(text_.encoder, Encoder::Load(site.tokenizer_dir, site.text_encoder_dir,
                                                  options, &comm(), site.sharded));
    AddWeightBytes(text_.encoder->weight_bytes());
    const int64_t embed_width = ((*text_.encoder).*width_)();
    const int64_t joint = transformer_shape().joint_attention_dim;
    if (embed_width == joint) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(root(), ": the text encoder gives ", embed_width, "-wide prompt embeddings (",
                     width_name_, ") but the transformer's joint_attention_dim is ", joint));
  }

  // The card's text fields: prompts when the folder has the encoder, else embeddings required.
  void FillTextCard(ModelCard* card) const {
    card->accepts_text_prompt = text_.site.present;
    card->requires_prompt_embeddings = !text_.site.present;
  }

  const LlmTextEncoderSite& text_site() const { return text_.site; }
  Encoder& text_encoder() const { return *text_.encoder; }

 private:
  LlmTextEncoder<Encoder> text_;
  int64_t (Encoder::*width_)() const;
  const char* width_name_;
};

}  // namespace ditserve::pipeline
