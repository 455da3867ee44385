// Loads an LLM text encoder (causal_lm_encoder.h) from a transformers component folder
// (text_encoder/ of a FLUX.2 or Qwen-Image pipeline) for one rank of a tensor-parallel group,
// through the production loader: the config is parsed (causal_lm_config.h), the built-in plan of
// the checkpoint's class placed under the text model's tensor-name prefix
// (sharding::BuiltinTpPlanForCheckpoint), validated against every tensor (degree dividing the
// attention and key/value head counts included) and this rank's slices read -- of the text model's
// tensors only: the vision tower, projector and lm_head bytes are never read.
//
// Call order across ranks: none while loading (every rank loads independently); the model's
// Forward is then a collective. Ownership: the returned model owns its tensors and borrows `comm`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/text/causal_lm_encoder.h"
#include "sharding/loader.h"

namespace ditserve::text {

struct LoadedCausalLm {
  std::unique_ptr<CausalLmTextEncoder> model;
  uint64_t weight_bytes = 0;  // bytes of this rank's tensors
};

// `opts.select` is replaced by the text-model filter; device, dtype, staging buffer and progress
// are used as given.
absl::StatusOr<LoadedCausalLm> LoadCausalLmTextEncoder(
    const std::string& component_dir, comm::Communicator* comm, sharding::LoadOptions opts,
    LlmAttentionImplementation implementation = LlmAttentionImplementation::kSdpa);

}  // namespace ditserve::text
