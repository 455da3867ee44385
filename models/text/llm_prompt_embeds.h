// How the FLUX.2 and Qwen-Image pipelines turn their LLM text encoder's hidden states into
// prompt embeddings (diffusers pipeline_flux2.py, pipeline_qwenimage.py).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::text {

// Flux2Pipeline._get_mistral_3_small_prompt_embeds: hidden states (B, T, H) of layers k1..kn
// (default (10, 20, 30)) stacked to (B, n, T, H), permuted and reshaped to (B, T, n·H): per token
// [h_k1 | h_k2 | ... ]. INVALID_ARGUMENT unless all are defined and of one 3-D shape.
absl::StatusOr<torch::Tensor> StackHiddenStatesPerToken(const std::vector<torch::Tensor>& hidden);

// QwenImagePipeline._get_qwen_prompt_embeds (+ encode_prompt's truncation): for each row the
// hidden states of its unmasked tokens, minus the first `drop_idx` (the chat template's prefix,
// 34), zero-padded at the end to the longest row; then both cut to `max_sequence_length`
// (<= 0: no cut). Returns (embeds (B, L, H), mask (B, L) int64 of 1 for real tokens).
absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> QwenImagePromptEmbeds(
    const torch::Tensor& last_hidden_state, const torch::Tensor& attention_mask, int64_t drop_idx,
    int64_t max_sequence_length = 0);

}  // namespace ditserve::text
