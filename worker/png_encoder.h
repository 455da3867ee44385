// PNG encoding of 8-bit RGB images through libpng, with tEXt chunks (the generation parameters,
// so an image carries its own provenance). Torch-free; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::worker {

// zlib's settings for the image data. The default is what the server writes: zlib's run-length
// strategy after libpng's adaptive row filters (a third of libpng's default time at the same size
// on a photograph, bench/results/2026-12-05-png-encoder.txt). `level` / `strategy` -1: libpng's
// own default (level 6, the default strategy); ditserve-png-encode-bench compares them.
struct PngCompression {
  int level = -1;
  int strategy = 3;  // Z_RLE (zlib.h stays out of this header)
};

// `rgb` is height x width x 3 bytes, row-major. Returns the PNG file bytes.
absl::StatusOr<std::string> EncodePng(const uint8_t* rgb, uint32_t height, uint32_t width,
                                      const std::vector<std::pair<std::string, std::string>>& text,
                                      const PngCompression& compression = {});

}  // namespace ditserve::worker
