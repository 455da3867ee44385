#include "models/text/activations.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ditserve::text {

absl::StatusOr<Activation> ParseActivation(const std::string& name) {
  if (name == "quick_gelu") return Activation::kQuickGelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
    return Activation::kGeluTanh;
  }
  if (name == "relu") return Activation::kRelu;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  return absl::InvalidArgumentError(absl::StrCat("unsupported activation '", name, "'"));
}

torch::Tensor Apply(Activation act, const torch::Tensor& x) {
  switch (act) {
    case Activation::kQuickGelu:
      return x * torch::sigmoid(1.702 * x);
    case Activation::kGelu:
      return torch::gelu(x);
    case Activation::kGeluTanh: {
      // The explicit formula of transformers' NewGELUActivation (not the fused tanh kernel).
      const double c = std::sqrt(2.0 / 3.14159265358979323846);  // sqrt(2/pi); M_PI is not ISO C++
      return 0.5 * x * (1.0 + torch::tanh(c * (x + 0.044715 * torch::pow(x, 3.0))));
    }
    case Activation::kRelu:
      return torch::relu(x);
    case Activation::kSilu:
      return torch::silu(x);
  }
  return x;
}

}  // namespace ditserve::text
