// Every tensor of a QwenImageTransformer2DModel state dict with its shape (diffusers transformer_qwenimage.py),
// for a config: what a checkpoint must hold, and what the benchmark fills with random
// weights.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/qwenimage/qwenimage_config.h"

namespace ditserve::models::qwenimage {

std::map<std::string, std::vector<int64_t>> QwenImageStateDictShapes(
    const QwenImageTransformerConfig& config);

}  // namespace ditserve::models::qwenimage
