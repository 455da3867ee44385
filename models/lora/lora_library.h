// The LoRA adapters a rank loaded at start, and switching them per request.
//
// For every adapted linear layer, Activate(choices) sums the chosen adapters into one low-rank
// pair: A = [A₁; A₂; ...] (Σr, in) and B = [w₁s₁B₁ | w₂s₂B₂ | ...] (out, Σr), with s the adapter's
// alpha / r for the module and w the request's weight (diffusers' set_adapters(names,
// adapter_weights)); the pairs are cached for the last choice set. Then, by the library's mode:
//   kMerge (default): a shadow copy of each adapted weight buffer gets W + B·A, and the buffer's
//     storage is pointed at the copy for the job (every view follows: fused q/k/v parts, the
//     state dict); the forward is the unadapted code at full speed. Costs one copy of the adapted
//     weights in memory while a job runs, and one pass over them per activation (FLUX.1-dev,
//     rank 64 on every block linear, measured on an H200: 57 ms a new set, then steps at the unadapted
//     speed, against +19 ms every step for kRuntime).
//     Ending the job points the storages back at the untouched originals: bit-identical.
//   kRuntime: the layers add x·Aᵀ·Bᵀ beside their GEMM (models/common/linear_layer.h); no extra
//     weight memory, a few % to ~15 % a step. For ranks short of memory; kMerge falls back to it
//     for a job whose merged copy does not fit. A library whose targets include FP8 weights
//     (models/common/fp8_linear.h) is kRuntime whatever was asked: a merge would need a
//     re-quantization per job.
// The returned LoraActivation undoes either when it goes out of scope (end of the job, or an error).
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
#include "common/model_flags.h"
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
  LoraActivation(LoraActivation&& o) noexcept
      : layers_(std::move(o.layers_)), swaps_(std::move(o.swaps_)) {
    o.layers_.clear();
    o.swaps_.clear();
  }
  LoraActivation& operator=(LoraActivation&& o) noexcept {
    if (this != &o) {
      Clear();
      layers_ = std::move(o.layers_);
      swaps_ = std::move(o.swaps_);
      o.layers_.clear();
      o.swaps_.clear();
    }
    return *this;
  }
  LoraActivation(const LoraActivation&) = delete;
  LoraActivation& operator=(const LoraActivation&) = delete;

  // Layers given runtime terms, weight buffers merged.
  size_t layers() const { return layers_.size(); }
  size_t merged_buffers() const { return swaps_.size(); }

 private:
  friend class LoraLibrary;
  // A weight buffer pointed at its merged copy; `original` holds the untouched bytes.
  struct Swap {
    c10::Storage storage;
    at::DataPtr original;
  };
  void Clear();
  std::vector<models::LinearLayer*> layers_;
  std::vector<Swap> swaps_;
};

// Merged copies per job, or runtime terms: common/model_flags.h's type (ParseLoraMode there).
using ::ditserve::LoraMode;

class LoraLibrary {
 public:
  LoraLibrary() = default;  // no adapters

  // Loads every spec for this rank of a model whose linear layers are `layers` (names must be
  // unique and non-empty). opts.device / opts.dtype must be the model's. Errors name the adapter.
  static absl::StatusOr<std::unique_ptr<LoraLibrary>> Load(
      const std::vector<LoraAdapterSpec>& specs, const models::LinearRegistry& layers, int rank,
      int world_size, const sharding::LoadOptions& opts, LoraMode mode = LoraMode::kMerge);

  LoraMode mode() const { return mode_; }
  // kMerge: the most bytes of merged copies one job may hold on this rank (0: no limit but the
  // device's memory); a job whose adapted buffers exceed it runs with runtime terms. Headroom for
  // activations that an operator plans for.
  void set_merge_max_bytes(uint64_t bytes) { merge_max_bytes_ = bytes; }
  // Activations in kMerge mode that ran as runtime terms (over merge_max_bytes, or out of memory).
  uint64_t merge_fallbacks() const { return merge_fallbacks_; }

  const std::vector<LoraCard>& cards() const { return cards_; }
  bool empty() const { return adapters_.empty(); }

  // INVALID_ARGUMENT for an unknown or repeated name, or a scale that is not finite or beyond
  // ±kMaxLoraScale. kMerge: when the merged copy exceeds merge_max_bytes or does not fit in device
  // memory, this job gets
  // runtime terms instead (merge_fallbacks() counts them); RESOURCE_EXHAUSTED only when those
  // do not fit either (nothing stays changed).
  // Empty choices: an empty activation (the unadapted model).
  absl::StatusOr<LoraActivation> Activate(const std::vector<LoraChoice>& choices);

 private:
  absl::Status Merge(LoraActivation* activation) const;

  LoraMode mode_ = LoraMode::kMerge;
  uint64_t merge_fallbacks_ = 0;
  uint64_t merge_max_bytes_ = 0;
  std::map<std::string, LoraAdapter> adapters_;
  std::vector<LoraCard> cards_;
  std::map<std::string, models::LinearLayer*> layers_;  // every adapted module's layer
  // The terms built for the last choice set.
  std::vector<LoraChoice> cached_choices_;
  std::map<std::string, models::LoraTerm> cached_terms_;
};

}  // namespace ditserve::lora
