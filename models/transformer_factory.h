// Builds the DiffusionTransformer a component's config.json names in "_class_name".
// Known classes: FluxTransformer2DModel, Flux2Transformer2DModel, QwenImageTransformer2DModel.
// (Adding one: a row in transformer_factory.cc and a
// target_link_libraries line in models/CMakeLists.txt.)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "models/transformer.h"
#include "sharding/state_dict.h"
#include "comm/communicator.h"

namespace ditserve::models {

// `sd`: this rank's weights (already on the target device and dtype); `comm`: the TP group
// (rank and size must match sd's; a single-rank communicator for tp = 1). Both must outlive the
// model. UNIMPLEMENTED for an unknown class name; the model's own errors otherwise.
absl::StatusOr<std::unique_ptr<DiffusionTransformer>> CreateTransformer(
    const nlohmann::json& config, const sharding::ShardedStateDict& sd, comm::Communicator* comm,
    const TransformerLoadOptions& options = {});

std::vector<std::string> KnownTransformerClasses();

}  // namespace ditserve::models
