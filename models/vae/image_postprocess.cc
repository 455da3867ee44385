#include "models/vae/image_postprocess.h"

#include "common/torch_compat.h"

namespace ditserve::vae {

absl::StatusOr<torch::Tensor> PostprocessImage(const torch::Tensor& decoded) {
  if (!decoded.defined() || decoded.dim() != 4 || !decoded.is_floating_point()) {
    return absl::InvalidArgumentError("image postprocess expects a floating (B, C, H, W) tensor");
  }
  return GuardTorch("image postprocess", [&] {
    torch::NoGradGuard no_grad;
    auto x = (decoded * 0.5 + 0.5).clamp(0.0, 1.0);
    return x.permute({0, 2, 3, 1}).to(torch::kFloat).contiguous();
  });
}

}  // namespace ditserve::vae
