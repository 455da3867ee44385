#include "pipeline/latents.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::pipeline {

int64_t VaeScaleFactor(int64_t num_vae_blocks) {
  return num_vae_blocks >= 1 ? int64_t{1} << (num_vae_blocks - 1) : 1;
}

int64_t LatentSide(int64_t pixels, int64_t vae_scale_factor) {
  return 2 * (pixels / (vae_scale_factor * 2));
}

absl::StatusOr<std::vector<torch::Tensor>> SeededDraws(
    const std::vector<std::vector<int64_t>>& shapes, uint64_t seed, torch::ScalarType dtype) {
  return GuardTorch("seeded draws", [&] {
    auto gen = compat::SeededCpuGenerator(seed);
    const auto cpu = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
    std::vector<torch::Tensor> out;
    for (const auto& shape : shapes) out.push_back(torch::randn(shape, gen, cpu));
    return out;
  });
}

absl::StatusOr<torch::Tensor> InitialNoise(const std::vector<int64_t>& shape, uint64_t seed,
                                           torch::ScalarType dtype, torch::Device device) {
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> draws, SeededDraws({shape}, seed, dtype));
  return GuardTorch("initial noise", [&] { return draws[0].to(device); });
}

absl::StatusOr<torch::Tensor> PackLatents(const torch::Tensor& x) {
  if (!x.defined() || x.dim() != 4 || x.size(2) % 2 != 0 || x.size(3) % 2 != 0) {
    return absl::InvalidArgumentError("PackLatents: expected (B, C, h, w) with even h and w");
  }
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return GuardTorch("pack latents", [&] {
    return x.reshape({b, c, h / 2, 2, w / 2, 2})
        .permute({0, 2, 4, 1, 3, 5})
        .reshape({b, (h / 2) * (w / 2), c * 4});
  });
}

absl::StatusOr<torch::Tensor> UnpackLatents(const torch::Tensor& p, int64_t h, int64_t w) {
  if (!p.defined() || p.dim() != 3 || h % 2 != 0 || w % 2 != 0 || p.size(1) != (h / 2) * (w / 2) ||
      p.size(2) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UnpackLatents: expected (B, ", (h / 2) * (w / 2), ", 4C) for a ", h, "x", w, " latent"));
  }
  const int64_t b = p.size(0), c = p.size(2) / 4;
  return GuardTorch("unpack latents", [&] {
    return p.reshape({b, h / 2, w / 2, c, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({b, c, h, w});
  });
}

torch::Tensor LatentImageIds(int64_t rows, int64_t cols, torch::ScalarType dtype,
                             torch::Device device) {
  auto ids = torch::zeros({rows, cols, 3}, torch::kFloat32);
  ids.select(2, 1).add_(torch::arange(rows, torch::kFloat32).unsqueeze(1));
  ids.select(2, 2).add_(torch::arange(cols, torch::kFloat32).unsqueeze(0));
  return ids.reshape({rows * cols, 3}).to(device, dtype);
}

}  // namespace ditserve::pipeline
