#include "pipeline/image_inputs.h"

#include "absl/strings/str_cat.h"
#include "common/torch_guard.h"

namespace ditserve::pipeline {

absl::StatusOr<torch::Tensor> VaeImageInput(const torch::Tensor& rgb, torch::ScalarType dtype,
                                            torch::Device device) {
  if (!rgb.defined() || rgb.dim() != 3 || rgb.size(2) != 3 || rgb.scalar_type() != torch::kUInt8) {
    return absl::InvalidArgumentError("an input image must be uint8 (H, W, 3)");
  }
  return GuardTorch("input image", [&] {
    torch::Tensor x = rgb.to(torch::kFloat32) / 255.0;  // numpy: astype(float32) / 255.0
    x = x.permute({2, 0, 1}).unsqueeze(0).contiguous();
    x = 2.0 * x - 1.0;
    return x.to(device, dtype);
  });
}

TokenGrid ImageTokenGrid(const torch::Tensor& rgb, int64_t pixels_per_token) {
  return TokenGrid{rgb.size(0) / pixels_per_token, rgb.size(1) / pixels_per_token};
}

torch::Tensor Flux2TokenIds(int64_t t, const TokenGrid& grid, torch::ScalarType dtype,
                            torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  const int64_t h = grid.rows, w = grid.cols;
  torch::Tensor ys = torch::arange(h, opts).view({-1, 1}).expand({h, w}).reshape({-1});
  torch::Tensor xs = torch::arange(w, opts).view({1, -1}).expand({h, w}).reshape({-1});
  torch::Tensor zeros = torch::zeros({h * w}, opts);
  return torch::stack({zeros + static_cast<double>(t), ys, xs, zeros}, 1);
}

}  // namespace ditserve::pipeline
