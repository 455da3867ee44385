// PixArtAlphaTextProjection(in, D, act="silu") (FLUX.1's pooled-text embedder), diffusers embeddings.py / normalization.py / attention.py:
// linear_2(SiLU(linear_1(p))) from "<prefix>.linear_{1,2}".
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/module_loader.h"

namespace ditserve::models {

class PixArtAlphaTextProjection {
 public:
  enum class Activation { kSilu, kGeluTanh };
  static absl::StatusOr<PixArtAlphaTextProjection> Load(const ModuleLoader& loader,
                                                        const std::string& prefix,
                                                        Activation act = Activation::kSilu);
  torch::Tensor Forward(const torch::Tensor& x) const;
  int64_t in_features() const { return linear_1_->in_features(); }

 private:
  PixArtAlphaTextProjection(std::shared_ptr<LinearLayer> l1, std::shared_ptr<LinearLayer> l2,
                            Activation act)
      : linear_1_(std::move(l1)), linear_2_(std::move(l2)), act_(act) {}
  std::shared_ptr<LinearLayer> linear_1_, linear_2_;
  Activation act_;
};

}  // namespace ditserve::models
