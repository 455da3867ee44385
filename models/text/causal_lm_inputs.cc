#include "models/text/causal_lm_inputs.h"

namespace ditserve::text {

torch::Tensor CausalLmPositionIds(const CausalLmConfig& config, const torch::Tensor& attention_mask,
                                  int64_t batch, int64_t seq_len, const torch::Device& device) {
  auto arange = torch::arange(seq_len, torch::TensorOptions().dtype(torch::kLong).device(device))
                    .unsqueeze(0)
                    .expand({batch, seq_len});
  if (!config.uses_mrope()) return arange.contiguous();
  torch::Tensor pos;
  if (attention_mask.defined()) {
    const auto mask = attention_mask.to(device, torch::kLong);
    pos = mask.cumsum(-1) - 1;
    pos.masked_fill_(mask == 0, 1);
  } else {
    pos = arange;
  }
  return pos.unsqueeze(0).expand({3, batch, seq_len}).contiguous();
}

torch::Tensor CausalLmAttendMask(const torch::Tensor& attention_mask, int64_t batch,
                                 int64_t seq_len, int64_t sliding_window,
                                 const torch::Device& device) {
  auto idx = torch::arange(seq_len, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto q = idx.view({seq_len, 1});
  auto k = idx.view({1, seq_len});
  auto allowed = k <= q;  // (T, T)
  if (sliding_window > 0) allowed = allowed.logical_and(k > q - sliding_window);
  auto mask = allowed.view({1, 1, seq_len, seq_len}).expand({batch, 1, seq_len, seq_len});
  if (attention_mask.defined()) {
    auto keys = attention_mask.to(device).to(torch::kBool).view({batch, 1, 1, seq_len});
    mask = mask.logical_and(keys);
  }
  return mask.contiguous();
}

}  // namespace ditserve::text
