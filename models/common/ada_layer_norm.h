// Adaptive LayerNorms (diffusers normalization.py). Chunk orders differ and matter:
//   AdaLayerNormZero        Linear_{D→6D}(SiLU(temb)) → shift_msa, scale_msa, gate_msa,
//                                                       shift_mlp, scale_mlp, gate_mlp
//   AdaLayerNormZeroSingle  Linear_{D→3D}(SiLU(temb)) → shift, scale, gate
//   AdaLayerNormContinuous  Linear_{C→2D}(SiLU(cond).to(x.dtype)) → scale, shift   (scale first!)
// Each normalises x with LayerNorm(eps, no affine) and modulates LN(x) * (1 + scale) + shift.
// The modulation Linear ("<prefix>.linear") must give the full output on every rank: replicated
// (the reference's plans) or rowwise_split_input (sharding::AddModulationSharding); Load refuses
// others.
//
// A model may compute every modulation of a step at once (models/tp/modulation_bank.h): it then
// gives each AdaLN a ModulationSource, which returns the layer's output for SiLU(temb) from the
// shared computation; without one the layer runs its own Linear.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/gated_residual.h"  // GatedResidual, for the blocks that use both
#include "models/common/module_loader.h"

namespace ditserve::models {

// temb → this layer's modulation Linear(SiLU(temb)), (B, out).
using ModulationSource = std::function<torch::Tensor(const torch::Tensor& temb)>;

// Linear(SiLU(temb)) from `source` when set (the shared computation), else from `linear` itself.
inline torch::Tensor ModulationOutput(const ModulationSource& source, const LinearLayer& linear,
                                      const torch::Tensor& temb) {
  return source ? source(temb) : linear.Forward(torch::silu(temb));
}

class AdaLayerNormZero {
 public:
  struct Output {
    torch::Tensor x;  // modulated LN(x) for the attention branch
    torch::Tensor gate_msa, shift_mlp, scale_mlp, gate_mlp;  // (B, D)
  };
  static absl::StatusOr<AdaLayerNormZero> Load(const ModuleLoader& loader,
                                               const std::string& prefix, double eps = 1e-6);
  Output Forward(const torch::Tensor& x, const torch::Tensor& temb) const;

  const std::shared_ptr<LinearLayer>& linear() const { return linear_; }
  void set_modulation_source(ModulationSource source) { source_ = std::move(source); }

 private:
  AdaLayerNormZero(std::shared_ptr<LinearLayer> linear, double eps)
      : linear_(std::move(linear)), eps_(eps) {}
  torch::Tensor Modulation(const torch::Tensor& temb) const;
  std::shared_ptr<LinearLayer> linear_;
  ModulationSource source_;
  double eps_;
};

class AdaLayerNormZeroSingle {
 public:
  struct Output {
    torch::Tensor x;
    torch::Tensor gate;  // (B, D)
  };
  static absl::StatusOr<AdaLayerNormZeroSingle> Load(const ModuleLoader& loader,
                                                     const std::string& prefix, double eps = 1e-6);
  Output Forward(const torch::Tensor& x, const torch::Tensor& temb) const;

  const std::shared_ptr<LinearLayer>& linear() const { return linear_; }
  void set_modulation_source(ModulationSource source) { source_ = std::move(source); }

 private:
  AdaLayerNormZeroSingle(std::shared_ptr<LinearLayer> linear, double eps)
      : linear_(std::move(linear)), eps_(eps) {}
  torch::Tensor Modulation(const torch::Tensor& temb) const;
  std::shared_ptr<LinearLayer> linear_;
  ModulationSource source_;
  double eps_;
};

class AdaLayerNormContinuous {
 public:
  static absl::StatusOr<AdaLayerNormContinuous> Load(const ModuleLoader& loader,
                                                     const std::string& prefix, double eps = 1e-6);
  torch::Tensor Forward(const torch::Tensor& x, const torch::Tensor& cond) const;

  const std::shared_ptr<LinearLayer>& linear() const { return linear_; }
  void set_modulation_source(ModulationSource source) { source_ = std::move(source); }

 private:
  AdaLayerNormContinuous(std::shared_ptr<LinearLayer> linear, double eps)
      : linear_(std::move(linear)), eps_(eps) {}
  torch::Tensor Modulation(const torch::Tensor& cond, torch::ScalarType dtype) const;
  std::shared_ptr<LinearLayer> linear_;
  ModulationSource source_;
  double eps_;
};

// LN(x) * (1 + scale[:, None]) + shift[:, None] for (B, S, D) x and (B, D) scale/shift.
torch::Tensor Modulate(const torch::Tensor& normed, const torch::Tensor& scale,
                       const torch::Tensor& shift);

}  // namespace ditserve::models
