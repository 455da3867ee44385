#include "models/common/complex_rope.h"

namespace ditserve::models {

torch::Tensor ComplexRopeFrequencies(const torch::Tensor& positions,
                                     const std::vector<int64_t>& axes_dims, double theta,
                                     const torch::Device& device) {
  TORCH_CHECK(positions.dim() == 2 && positions.size(1) == static_cast<int64_t>(axes_dims.size()),
              "rope positions must be (S, ", axes_dims.size(), "), got ", positions.sizes());
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto pos = positions.to(torch::kCPU).to(torch::kFloat32);
  std::vector<torch::Tensor> parts;
  for (size_t a = 0; a < axes_dims.size(); ++a) {
    const int64_t d = axes_dims[a];
    TORCH_CHECK(d > 0 && d % 2 == 0, "rope axis width must be positive and even, got ", d);
    // 1.0 / pow(theta, arange(0, d, 2).float() / d), every op in float32 (rope_params).
    auto omega = 1.0 / torch::pow(theta, torch::arange(0, d, 2, f32) / static_cast<double>(d));
    auto angles = torch::outer(pos.select(1, static_cast<int64_t>(a)).contiguous(), omega);
    parts.push_back(torch::polar(torch::ones_like(angles), angles));
  }
  return torch::cat(parts, 1).to(device);
}

torch::Tensor ApplyRotaryEmbComplex(const torch::Tensor& x, const torch::Tensor& freqs) {
  std::vector<int64_t> pair_shape(x.sizes().begin(), x.sizes().end() - 1);
  pair_shape.push_back(-1);
  pair_shape.push_back(2);
  auto xc = torch::view_as_complex(x.to(torch::kFloat32).reshape(pair_shape).contiguous());
  auto out = torch::view_as_real(xc * freqs.unsqueeze(1)).flatten(3);
  return out.to(x.scalar_type());
}

}  // namespace ditserve::models
