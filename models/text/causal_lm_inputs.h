// What transformers builds from (input_ids, attention_mask) before the decoder layers of a
// Mistral / Qwen2.5-VL text model, for a single forward without a cache (use_cache irrelevant: an
// empty cache gives the same values):
//
// Position ids
//   Mistral (MistralModel): cache_position = arange(T) for every row, padding or not (a
//     LEFT-padded prompt's first real token is NOT at position 0).
//   Qwen2.5-VL (Qwen2_5_VLModel.get_rope_index, text-only input): with an attention mask,
//     cumsum(mask) - 1 with the masked positions set to 1; without one, arange(T); the same on the
//     3 M-RoPE axes -> (3, B, T).
//
// Attention mask (masking_utils.create_causal_mask / create_sliding_window_causal_mask, sdpa):
//   query q may attend key k iff k <= q, attention_mask[b, k] == 1 and, with a sliding window W,
//   k > q - W. A query with no key left (a left pad: every earlier key is a pad too) is a fully
//   masked row: PyTorch >= 2.5's SDPA returns zeros there, eager attention (additive finfo.min
//   mask) a uniform average over all keys; see causal_lm_attention.h.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "models/text/causal_lm_config.h"

namespace ditserve::text {

// `attention_mask`: (B, T) 0/1 or undefined (no padding). (B, T) int64 for 1-D RoPE,
// (3, B, T) for M-RoPE (config.uses_mrope()).
torch::Tensor CausalLmPositionIds(const CausalLmConfig& config, const torch::Tensor& attention_mask,
                                  int64_t batch, int64_t seq_len, const torch::Device& device);

// (B, 1, T, T) bool, true = attend. `attention_mask` as above; sliding_window 0 = none.
torch::Tensor CausalLmAttendMask(const torch::Tensor& attention_mask, int64_t batch,
                                 int64_t seq_len, int64_t sliding_window,
                                 const torch::Device& device);

}  // namespace ditserve::text
