// Lossy WebP encoding of 8-bit RGB images through Debian's libwebp (WebPEncodeRGB: no alpha, no
// metadata chunks; the generation parameters are in the PNG's tEXt and the JPEG's COM only).
// Torch-free; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ditserve::worker {

// WebP's largest side.
inline constexpr uint32_t kMaxWebpSide = 16383;

// `rgb` is height x width x 3 bytes, row-major; `quality` 0..100 (libwebp's quality factor).
// Returns the WebP file bytes.
absl::StatusOr<std::string> EncodeWebp(const uint8_t* rgb, uint32_t height, uint32_t width,
                                       uint32_t quality);

}  // namespace ditserve::worker
