// The interface every diffusion transformer (FLUX.1, FLUX.2, Qwen-Image) offers to the pipeline,
// the forward harness (ditserve-tool forward) and the benchmarks. Build one with
// CreateTransformer (models/transformer_factory.h). Implementations derive from
// DiffusionTransformerBase (models/transformer_base.h), which holds what the three families share.
//
// Arguments are named as in the diffusers forward signature ("hidden_states", "timestep", ...);
// floating inputs are moved to the model's device and dtype by the model. Forward is a collective
// under tensor parallelism: every rank calls it in the same order with same-shaped arguments.
// Forward never throws (errors come back as Status; UNAVAILABLE means the TP group broke).
// Thread-safety: one Forward at a time per instance.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "models/common/first_block_cache.h"
#include "models/common/fp8_linear.h"
#include "models/common/linear_registry.h"
#include "models/common/step_graphs.h"

namespace ditserve::models {

// How a transformer builds its layers beyond what the checkpoint and the plan say.
struct TransformerLoadOptions {
  // kFp8: the blocks' token GEMMs quantized to FP8 at load (models/common/fp8_linear.h); the caller
  // has checked CheckFp8Supported for the weights' device and dtype.
  WeightFormat weights = WeightFormat::kModelDtype;
  // CUDA graphs of the forward kept per model (models/common/step_graphs.h); 0: op by op always.
  int cuda_graphs = kDefaultCudaGraphs;
};

class DiffusionTransformer {
 public:
  virtual ~DiffusionTransformer() = default;

  // config.json's "_class_name" of the implementation.
  virtual std::string class_name() const = 0;
  // Names Forward requires / accepts in addition.
  virtual std::vector<std::string> RequiredArguments() const = 0;
  virtual std::vector<std::string> OptionalArguments() const = 0;
  virtual torch::ScalarType dtype() const = 0;
  virtual torch::Device device() const = 0;

  // Every linear layer by module path, as built for this rank (LoRA adapters' targets). The layers'
  // LoRA terms may be set between forwards (models/lora/lora_library.h).
  virtual const LinearRegistry& linear_layers() const = 0;

  // How its forwards ran: CUDA graph captures and replays, op by op (models/common/step_graphs.h).
  virtual StepGraphStats graph_stats() const = 0;

  // The predicted velocity, (B, tokens, out_channels), in the model's dtype on its device.
  // `cache`: null, or the First Block Cache state of this pass's call context
  // (models/common/first_block_cache.h), which the pass reads and updates; with a cache the pass
  // is two CUDA graphs (the first block; then the rest, or the cached tail) around its decision,
  // which reads the device and is a collective.
  virtual absl::StatusOr<torch::Tensor> Forward(const std::map<std::string, torch::Tensor>& args,
                                                FirstBlockCache* cache) = 0;
  absl::StatusOr<torch::Tensor> Forward(const std::map<std::string, torch::Tensor>& args) {
    return Forward(args, nullptr);
  }
};

// For implementations of Forward(map): INVALID_ARGUMENT naming the first argument that `model`
// neither requires nor accepts ("<what> forward: unknown argument 'x'").
inline absl::Status CheckArgumentNames(const DiffusionTransformer& model,
                                       const std::map<std::string, torch::Tensor>& args,
                                       const char* what) {
  const auto req = model.RequiredArguments(), opt = model.OptionalArguments();
  for (const auto& [name, t] : args) {
    if (std::find(req.begin(), req.end(), name) == req.end() &&
        std::find(opt.begin(), opt.end(), name) == opt.end()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " forward: unknown argument '", name, "'"));
    }
  }
  return absl::OkStatus();
}

// The named argument, or an undefined tensor when absent.
inline torch::Tensor ArgumentOrUndefined(const std::map<std::string, torch::Tensor>& args,
                                         const std::string& name) {
  auto it = args.find(name);
  return it == args.end() ? torch::Tensor() : it->second;
}

}  // namespace ditserve::models
