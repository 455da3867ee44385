#include "models/vae/qwenimage_latents.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"

namespace ditserve::vae {
namespace {

std::string Shape(const torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("nothing");
}

// torch.tensor(list_of_python_floats): float32.
torch::Tensor Float32Constants(const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  return torch::tensor(f, torch::kFloat);
}

}  // namespace

absl::StatusOr<torch::Tensor> UnpackQwenImageTokens(const torch::Tensor& tokens,
                                                    int64_t latent_height, int64_t latent_width) {
  if (!tokens.defined() || tokens.dim() != 3 || tokens.size(2) % 4 != 0 || tokens.size(2) == 0 ||
      tokens.size(0) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Qwen-Image latents: expected packed tokens (B, L, 4C), got ", Shape(tokens)));
  }
  if (latent_height < 2 || latent_width < 2 || latent_height % 2 != 0 || latent_width % 2 != 0 ||
      tokens.size(1) != (latent_height / 2) * (latent_width / 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Qwen-Image latents: ", tokens.size(1), " tokens do not form a ", latent_height, " x ",
        latent_width, " latent (even sides, one token per 2x2 patch)"));
  }
  return GuardTorch("Qwen-Image unpack latents", [&] {
    const int64_t b = tokens.size(0), c = tokens.size(2) / 4;
    return tokens.reshape({b, latent_height / 2, latent_width / 2, c, 2, 2})
        .permute({0, 3, 1, 4, 2, 5})
        .reshape({b, c, 1, latent_height, latent_width});
  });
}

absl::StatusOr<torch::Tensor> DenormalizeQwenImageLatents(const torch::Tensor& z,
                                                          const std::vector<double>& latents_mean,
                                                          const std::vector<double>& latents_std,
                                                          torch::ScalarType dtype) {
  if (!z.defined() || z.dim() != 5 || !z.is_floating_point() ||
      z.size(1) != static_cast<int64_t>(latents_mean.size()) ||
      z.size(1) != static_cast<int64_t>(latents_std.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Qwen-Image latents: expected floating (B, ",
                                                   latents_mean.size(), ", T, h, w), got ",
                                                   Shape(z)));
  }
  return GuardTorch("Qwen-Image de-normalise latents", [&] {
    torch::NoGradGuard no_grad;
    auto x = z.to(dtype);
    const int64_t c = z.size(1);
    auto mean = Float32Constants(latents_mean).view({1, c, 1, 1, 1}).to(x.device(), dtype);
    auto inv_std = 1.0 / Float32Constants(latents_std).view({1, c, 1, 1, 1}).to(x.device(), dtype);
    return x / inv_std + mean;
  });
}

namespace {

// (z - mean) / std (`reciprocal` false), or (z - mean) * (1 / std) (true), constants cast to z's
// dtype first.
absl::StatusOr<torch::Tensor> ShiftAndScale(const torch::Tensor& z,
                                            const std::vector<double>& latents_mean,
                                            const std::vector<double>& latents_std,
                                            bool reciprocal) {
  if (!z.defined() || z.dim() != 5 || !z.is_floating_point() ||
      z.size(1) != static_cast<int64_t>(latents_mean.size()) ||
      z.size(1) != static_cast<int64_t>(latents_std.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Qwen-Image image latents: expected floating (B, ", latents_mean.size(),
                     ", T, h, w), got ", Shape(z)));
  }
  return GuardTorch("Qwen-Image normalise image latents", [&] {
    torch::NoGradGuard no_grad;
    const int64_t c = z.size(1);
    auto mean = Float32Constants(latents_mean).view({1, c, 1, 1, 1}).to(z.device(), z.dtype());
    auto std = Float32Constants(latents_std).view({1, c, 1, 1, 1}).to(z.device(), z.dtype());
    return reciprocal ? (z - mean) * (1.0 / std) : (z - mean) / std;
  });
}

}  // namespace

absl::StatusOr<torch::Tensor> NormalizeQwenImageLatents(const torch::Tensor& z,
                                                        const std::vector<double>& latents_mean,
                                                        const std::vector<double>& latents_std) {
  return ShiftAndScale(z, latents_mean, latents_std, /*reciprocal=*/false);
}

absl::StatusOr<torch::Tensor> ScaleQwenImageImg2ImgLatents(const torch::Tensor& z,
                                                           const std::vector<double>& latents_mean,
                                                           const std::vector<double>& latents_std) {
  return ShiftAndScale(z, latents_mean, latents_std, /*reciprocal=*/true);
}

}  // namespace ditserve::vae
