#include "models/text/llm_prompt_embeds.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/torch_guard.h"
#include "models/common/model_checks.h"

namespace ditserve::text {

absl::StatusOr<torch::Tensor> StackHiddenStatesPerToken(const std::vector<torch::Tensor>& hidden) {
  if (hidden.empty()) return absl::InvalidArgumentError("no hidden states to stack");
  for (const auto& h : hidden) {
    if (!h.defined() || h.dim() != 3 || h.sizes() != hidden[0].sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hidden states to stack must all be (B, T, H) of one shape; got ",
          models::ShapeString(h), " and ", models::ShapeString(hidden[0])));
    }
  }
  return GuardTorch("stacking hidden states", [&] {
    const int64_t b = hidden[0].size(0), t = hidden[0].size(1), h = hidden[0].size(2);
    const int64_t n = static_cast<int64_t>(hidden.size());
    return torch::stack(hidden, 1).permute({0, 2, 1, 3}).reshape({b, t, n * h});
  });
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> QwenImagePromptEmbeds(
    const torch::Tensor& last_hidden_state, const torch::Tensor& attention_mask, int64_t drop_idx,
    int64_t max_sequence_length) {
  if (!last_hidden_state.defined() || last_hidden_state.dim() != 3 || !attention_mask.defined() ||
      attention_mask.dim() != 2 || attention_mask.size(0) != last_hidden_state.size(0) ||
      attention_mask.size(1) != last_hidden_state.size(1) || drop_idx < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QwenImagePromptEmbeds: hidden states ", models::ShapeString(last_hidden_state),
        " and mask ", models::ShapeString(attention_mask),
        " must be (B, T, H) and (B, T), drop_idx >= 0"));
  }
  return GuardTorch("Qwen-Image prompt embeddings", [&] {
    const auto mask = attention_mask.to(last_hidden_state.device()).to(torch::kBool);
    std::vector<torch::Tensor> rows;
    int64_t longest = 0;
    for (int64_t i = 0; i < last_hidden_state.size(0); ++i) {
      auto kept = last_hidden_state[i].index({mask[i]});
      kept = kept.narrow(0, std::min(drop_idx, kept.size(0)),
                         kept.size(0) - std::min(drop_idx, kept.size(0)));
      longest = std::max(longest, kept.size(0));
      rows.push_back(kept);
    }
    std::vector<torch::Tensor> embeds, masks;
    for (const auto& r : rows) {
      const int64_t pad = longest - r.size(0);
      embeds.push_back(torch::cat({r, r.new_zeros({pad, r.size(1)})}));
      auto m = torch::ones({r.size(0)}, torch::TensorOptions().dtype(torch::kLong).device(r.device()));
      masks.push_back(torch::cat({m, m.new_zeros({pad})}));
    }
    auto e = torch::stack(embeds);
    auto m = torch::stack(masks);
    if (max_sequence_length > 0 && e.size(1) > max_sequence_length) {
      e = e.narrow(1, 0, max_sequence_length);
      m = m.narrow(1, 0, max_sequence_length);
    }
    return std::make_pair(e, m);
  });
}

}  // namespace ditserve::text
