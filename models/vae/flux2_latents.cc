#include "models/vae/flux2_latents.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"

namespace ditserve::vae {
namespace {

std::string Shape(const torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("nothing");
}

absl::Status CheckTokens(const torch::Tensor& tokens) {
  if (!tokens.defined() || tokens.dim() != 3 || !tokens.is_floating_point() || tokens.size(0) < 1 ||
      tokens.size(1) < 1 || tokens.size(2) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FLUX.2 latents: expected floating packed tokens (B, L, C), got ", Shape(tokens)));
  }
  return absl::OkStatus();
}

absl::Status CheckStatistics(const torch::Tensor& z, const torch::Tensor& running_mean,
                             const torch::Tensor& running_var) {
  if (!z.defined() || z.dim() != 4 || !z.is_floating_point()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FLUX.2 latents: expected floating (B, C, h, w), got ", Shape(z)));
  }
  const int64_t c = z.size(1);
  if (!running_mean.defined() || !running_var.defined() || running_mean.numel() != c ||
      running_var.numel() != c) {
    return absl::InvalidArgumentError(absl::StrCat("FLUX.2 latents: BatchNorm statistics ",
                                                   Shape(running_mean), " / ", Shape(running_var),
                                                   " do not match ", c, " latent channels"));
  }
  return absl::OkStatus();
}

// The pipeline's latents_bn_mean / latents_bn_std: (1, C, 1, 1), the sqrt taken in the
// statistics' dtype, both then cast to z's dtype and device.
std::pair<torch::Tensor, torch::Tensor> Statistics(const torch::Tensor& z,
                                                   const torch::Tensor& running_mean,
                                                   const torch::Tensor& running_var,
                                                   double batch_norm_eps) {
  auto mean = running_mean.view({1, -1, 1, 1}).to(z.device(), z.scalar_type());
  auto std =
      torch::sqrt(running_var.view({1, -1, 1, 1}) + batch_norm_eps).to(z.device(), z.scalar_type());
  return {mean, std};
}

}  // namespace

absl::StatusOr<torch::Tensor> UnpackFlux2TokensWithIds(const torch::Tensor& tokens,
                                                       const torch::Tensor& latent_ids) {
  if (auto s = CheckTokens(tokens); !s.ok()) return s;
  if (!latent_ids.defined() || latent_ids.dim() != 3 || latent_ids.size(0) != tokens.size(0) ||
      latent_ids.size(1) != tokens.size(1) || latent_ids.size(2) < 3) {
    return absl::InvalidArgumentError(absl::StrCat("FLUX.2 latents: ids ", Shape(latent_ids),
                                                   " do not fit tokens ", Shape(tokens),
                                                   " (expected (B, L, 4) rows (t, y, x, l))"));
  }
  return GuardTorch("FLUX.2 unpack latents", [&] {
    torch::NoGradGuard no_grad;
    auto ids = latent_ids.to(torch::kCPU, torch::kLong);
    if (ids.select(2, 1).min().item<int64_t>() < 0 || ids.select(2, 2).min().item<int64_t>() < 0) {
      throw StatusError(absl::InvalidArgumentError("negative position ids"));
    }
    std::vector<torch::Tensor> per_sample;
    const int64_t ch = tokens.size(2);
    for (int64_t b = 0; b < tokens.size(0); ++b) {
      auto h_ids = ids[b].select(1, 1);
      auto w_ids = ids[b].select(1, 2);
      const int64_t h = h_ids.max().item<int64_t>() + 1;
      const int64_t w = w_ids.max().item<int64_t>() + 1;
      auto flat = (h_ids * w + w_ids).to(tokens.device());
      auto out = torch::zeros({h * w, ch}, tokens.options());
      out.scatter_(0, flat.unsqueeze(1).expand({-1, ch}), tokens[b]);
      per_sample.push_back(out.view({h, w, ch}).permute({2, 0, 1}));
    }
    // Like torch.stack in the reference, this requires every sample's grid to have one size.
    return torch::stack(per_sample, 0);
  });
}

absl::StatusOr<torch::Tensor> UnpackFlux2Tokens(const torch::Tensor& tokens, int64_t height,
                                                int64_t width) {
  if (auto s = CheckTokens(tokens); !s.ok()) return s;
  if (height < 1 || width < 1 || tokens.size(1) != height * width) {
    return absl::InvalidArgumentError(absl::StrCat("FLUX.2 latents: ", tokens.size(1),
                                                   " tokens do not form a ", height, " x ", width,
                                                   " grid"));
  }
  return GuardTorch("FLUX.2 unpack latents", [&] {
    const int64_t b = tokens.size(0), ch = tokens.size(2);
    return tokens.reshape({b, height, width, ch}).permute({0, 3, 1, 2});
  });
}

absl::StatusOr<torch::Tensor> DenormalizeFlux2Latents(const torch::Tensor& z,
                                                      const torch::Tensor& running_mean,
                                                      const torch::Tensor& running_var,
                                                      double batch_norm_eps) {
  if (auto s = CheckStatistics(z, running_mean, running_var); !s.ok()) return s;
  return GuardTorch("FLUX.2 de-normalise latents", [&] {
    torch::NoGradGuard no_grad;
    auto [mean, std] = Statistics(z, running_mean, running_var, batch_norm_eps);
    return z * std + mean;
  });
}

absl::StatusOr<torch::Tensor> NormalizeFlux2Latents(const torch::Tensor& z,
                                                    const torch::Tensor& running_mean,
                                                    const torch::Tensor& running_var,
                                                    double batch_norm_eps) {
  if (auto s = CheckStatistics(z, running_mean, running_var); !s.ok()) return s;
  return GuardTorch("FLUX.2 normalise latents", [&] {
    torch::NoGradGuard no_grad;
    auto [mean, std] = Statistics(z, running_mean, running_var, batch_norm_eps);
    return (z - mean) / std;
  });
}

absl::StatusOr<torch::Tensor> UnpatchifyFlux2Latents(const torch::Tensor& z) {
  if (!z.defined() || z.dim() != 4 || z.size(1) % 4 != 0 || z.size(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FLUX.2 un-patchify: expected (B, 4C, h, w), got ", Shape(z)));
  }
  return GuardTorch("FLUX.2 un-patchify latents", [&] {
    const int64_t b = z.size(0), c = z.size(1) / 4, h = z.size(2), w = z.size(3);
    return z.reshape({b, c, 2, 2, h, w}).permute({0, 1, 4, 2, 5, 3}).reshape({b, c, h * 2, w * 2});
  });
}

absl::StatusOr<torch::Tensor> PatchifyFlux2Latents(const torch::Tensor& z) {
  if (!z.defined() || z.dim() != 4 || z.size(1) == 0 || z.size(2) % 2 != 0 || z.size(3) % 2 != 0 ||
      z.size(2) == 0 || z.size(3) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FLUX.2 patchify: expected (B, C, H, W) with even H and W, got ", Shape(z)));
  }
  return GuardTorch("FLUX.2 patchify latents", [&] {
    const int64_t b = z.size(0), c = z.size(1), h = z.size(2) / 2, w = z.size(3) / 2;
    return z.reshape({b, c, h, 2, w, 2}).permute({0, 1, 3, 5, 2, 4}).reshape({b, c * 4, h, w});
  });
}

}  // namespace ditserve::vae
