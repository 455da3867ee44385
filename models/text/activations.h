// Activation functions of the Hugging Face text encoders, by their config names, written out with
// the same formulas transformers uses (so float32 results agree to rounding).
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::text {

enum class Activation {
  kQuickGelu,  // "quick_gelu": x * sigmoid(1.702 x) (CLIP)
  kGelu,       // "gelu": exact erf GELU
  kGeluTanh,   // "gelu_new" / "gelu_pytorch_tanh" / "gelu_fast": tanh approximation (T5 v1.1)
  kRelu,       // "relu" (original T5)
  kSilu,       // "silu" / "swish"
};

// The activation for a transformers ACT2FN name, or INVALID_ARGUMENT.
absl::StatusOr<Activation> ParseActivation(const std::string& name);

torch::Tensor Apply(Activation act, const torch::Tensor& x);

}  // namespace ditserve::text
