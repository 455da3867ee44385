// Flux2Modulation (diffusers transformer_flux2.py): one modulation Linear shared
// by all blocks of a stream, computed once per forward as linear(SiLU(temb)) and chunked into
// `sets` sets of (shift, scale, gate): double-stream 2 sets (attention, MLP), single-stream 1.
// The Linear ("<prefix>.linear", bias-free in FLUX.2) is replicated in every plan; Load refuses a
// sharded one. Thread-safety: immutable after Load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/module_loader.h"

namespace ditserve::models::flux2 {

struct ModulationSet {
  torch::Tensor shift, scale, gate;  // (B, D) each
};

class Flux2Modulation {
 public:
  static absl::StatusOr<Flux2Modulation> Load(const ModuleLoader& loader, const std::string& prefix,
                                              int64_t dim, int sets);
  std::vector<ModulationSet> Forward(const torch::Tensor& temb) const;

  // The Linear, and where its output comes from once the model shares one GEMM for all its
  // modulations (models/tp/modulation_bank.h); unset: it runs its own.
  const std::shared_ptr<LinearLayer>& linear() const { return linear_; }
  void set_modulation_source(ModulationSource source) { source_ = std::move(source); }

 private:
  Flux2Modulation(std::shared_ptr<LinearLayer> linear, int sets)
      : linear_(std::move(linear)), sets_(sets) {}
  std::shared_ptr<LinearLayer> linear_;
  ModulationSource source_;
  int sets_;
};

}  // namespace ditserve::models::flux2
