// The LoRA adapters a rank loaded at start, and switching them per request.
//
// Activate(choices) installs, on every adapted linear layer of the model, one low-rank term that
// sums the chosen adapters: A = [A₁; A₂; ...] (Σr, in) and B = [w₁s₁B₁ | w₂s₂B₂ | ...] (out, Σr),
// with s the adapter's alpha / r for the module and w the request's weight (diffusers'
// set_adapters(names, adapter_weights)); the layers then add x·Aᵀ·Bᵀ beside their GEMM
// (models/common/linear_layer.h). Nothing is merged into the base weights, so they are never
// modified and the unadapted path stays bit-identical; switching costs building the scaled Bs
// (cached for the last choice set) and no weight copies. The returned LoraActivation clears the
// terms when it goes out of scope (end of the job, or an error).
//
// Threads: Load, Activate and the activation's destruction on the thread that runs the model, with
// no forward in flight. One activation at a time. Call order across ranks: none (no collective);
// every rank activates the same choices for a job.
// Ownership: borrows the model's layers (the library must not outlive the model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/lora/lora_adapter.h"
#include "models/lora/lora_choice.h"
#include "models/common/linear_registry.h"

namespace ditserve::lora {

// What ModelInfo says of a loaded adapter.
struct LoraCard {
  std::string name;
  std::string format;   // "diffusers", "kohya"
  int64_t rank = 0;     // the largest rank of its modules
  int64_t modules = 0;  // adapted modules
  uint64_t bytes = 0;   // this rank's bytes of factors
};

class LoraActivation {
 public:
  LoraActivation() = default;
  ~LoraActivation() { Clear(); }
  LoraActivation(LoraActivation&& o) noexcept : layers_(std::move(o.layers_)) { o.layers_.clear(); }
  LoraActivation& operator=(LoraActivation&& o) noexcept {
    if (this != &o) {
      Clear();
      layers_ = std::move(o.layers_);
      o.layers_.clear();
    }
    return *this;
  }
  LoraActivation(const LoraActivation&) = delete;
  LoraActivation& operator=(const LoraActivation&) = delete;

  size_t layers() const { return layers_.size(); }

 private:
  friend class LoraLibrary;
  void Clear() {
    for (models::LinearLayer* l : layers_) l->ClearLoraTerms();
    layers_.clear();
  }
  std::vector<models::LinearLayer*> layers_;
};

// Bounds a request's choices are validated against (the frontend applies the same).
inline constexpr float kMaxLoraScale = 8.0f;

class LoraLibrary {
 public:
  LoraLibrary() = default;  // no adapters

  // Loads every spec for this rank of a model whose linear layers are `layers` (names must be
  // unique and non-empty). opts.device / opts.dtype must be the model's. Errors name the adapter.
  static absl::StatusOr<std::unique_ptr<LoraLibrary>> Load(
      const std::vector<LoraAdapterSpec>& specs, const models::LinearRegistry& layers, int rank,
      int world_size, const sharding::LoadOptions& opts);

  const std::vector<LoraCard>& cards() const { return cards_; }
  bool empty() const { return adapters_.empty(); }

  // INVALID_ARGUMENT for an unknown or repeated name, or a scale that is not finite or beyond
  // ±kMaxLoraScale. Empty choices: an empty activation (the unadapted model).
  absl::StatusOr<LoraActivation> Activate(const std::vector<LoraChoice>& choices);

 private:
  std::map<std::string, LoraAdapter> adapters_;
  std::vector<LoraCard> cards_;
  std::map<std::string, models::LinearLayer*> layers_;  // every adapted module's layer
  // The terms built for the last choice set.
  std::vector<LoraChoice> cached_choices_;
  std::map<std::string, models::LoraTerm> cached_terms_;
};

}  // namespace ditserve::lora
