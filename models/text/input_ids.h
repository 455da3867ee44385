// Validation of token-id tensors before they reach an embedding lookup (which would otherwise
// fail with an opaque index error, or read out of range on some devices).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "absl/status/status.h"

namespace ditserve::text {

// OK iff `ids` is a defined 2-D integer tensor (B, S) with B, S >= 1, S <= max_len (max_len <= 0:
// unlimited) and every id in [0, vocab_size). `model` prefixes the message.
absl::Status ValidateInputIds(const torch::Tensor& ids, int64_t vocab_size, int64_t max_len,
                              const char* model);

}  // namespace ditserve::text
