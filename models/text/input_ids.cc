#include "models/text/input_ids.h"

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"

namespace ditserve::text {

absl::Status ValidateInputIds(const torch::Tensor& ids, int64_t vocab_size, int64_t max_len,
                              const char* model) {
  if (!ids.defined()) return absl::InvalidArgumentError(absl::StrCat(model, ": no input ids"));
  if (ids.dim() != 2 || ids.size(0) < 1 || ids.size(1) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": input ids must be a non-empty (batch, sequence) tensor"));
  }
  if (ids.is_floating_point() || ids.is_complex() || ids.scalar_type() == torch::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": input ids must be integers"));
  }
  if (max_len > 0 && ids.size(1) > max_len) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": sequence length ", ids.size(1),
                                                   " exceeds the maximum ", max_len));
  }
  auto range = GuardTorch("input id range", [&] {
    return std::make_pair(ids.min().item<int64_t>(), ids.max().item<int64_t>());
  });
  if (!range.ok()) return range.status();
  if (range->first < 0 || range->second >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": token id out of range [0, ",
                                                   vocab_size, "): min ", range->first, ", max ",
                                                   range->second));
  }
  return absl::OkStatus();
}

}  // namespace ditserve::text
