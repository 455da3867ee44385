// Every tensor of a FluxTransformer2DModel state dict with its shape (diffusers
// transformer_flux.py), for a config: what a checkpoint must hold, and what the benchmark fills
// with random weights.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/flux1/flux1_config.h"

namespace ditserve::models::flux1 {

std::map<std::string, std::vector<int64_t>> FluxStateDictShapes(
    const FluxTransformerConfig& config);

}  // namespace ditserve::models::flux1
