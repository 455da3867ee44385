// PNG encoding of 8-bit RGB images through libpng, with tEXt chunks (the generation parameters,
// so an image carries its own provenance). Torch-free; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::worker {

// `rgb` is height x width x 3 bytes, row-major. Returns the PNG file bytes.
absl::StatusOr<std::string> EncodePng(const uint8_t* rgb, uint32_t height, uint32_t width,
                                      const std::vector<std::pair<std::string, std::string>>& text);

}  // namespace ditserve::worker
