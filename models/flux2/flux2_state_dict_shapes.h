// Every tensor of a Flux2Transformer2DModel state dict with its shape (diffusers transformer_flux2.py), for
// a config: what a checkpoint must hold, and what the benchmark fills with random weights.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/flux2/flux2_config.h"

namespace ditserve::models::flux2 {

std::map<std::string, std::vector<int64_t>> Flux2StateDictShapes(const Flux2TransformerConfig& config);

}  // namespace ditserve::models::flux2
