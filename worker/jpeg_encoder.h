// JPEG encoding of 8-bit RGB images through Debian's libjpeg-turbo (baseline, 4:2:0 chroma
// subsampling, optimised Huffman tables), with the generation parameters as one COM marker
// ("key: value" lines), as the PNG encoder writes them as tEXt chunks. Torch-free; thread-safe (no
// shared state).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::worker {

// `rgb` is height x width x 3 bytes, row-major; `quality` 0..100 (libjpeg's scale; 0 acts as 1).
// Returns the JPEG file bytes.
absl::StatusOr<std::string> EncodeJpeg(
    const uint8_t* rgb, uint32_t height, uint32_t width, uint32_t quality,
    const std::vector<std::pair<std::string, std::string>>& text);

}  // namespace ditserve::worker
