// Which image format a byte string holds and the size its header claims, read without decoding
// (and without allocating anything proportional to the claimed size), so that decode.h can refuse a
// decompression bomb before any decoder sees it. Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::imaging {

enum class ImageFormat { kPng, kJpeg, kWebp };

// "PNG", "JPEG", "WebP".
absl::string_view ImageFormatName(ImageFormat format);

// By signature: PNG's 8-byte signature, JPEG's FF D8 FF, WebP's "RIFF" <size> "WEBP".
// INVALID_ARGUMENT naming the accepted formats otherwise.
absl::StatusOr<ImageFormat> SniffImageFormat(absl::string_view bytes);

struct ImageHeader {
  ImageFormat format = ImageFormat::kPng;
  uint32_t width = 0;   // as stored (before any EXIF orientation)
  uint32_t height = 0;
};

// The stored size: PNG's IHDR (the first chunk), JPEG's first SOFn marker (walking the marker
// segments from SOI), WebP's VP8X canvas or its VP8 / VP8L frame header. INVALID_ARGUMENT when the
// header is missing, truncated, malformed or claims a zero size.
absl::StatusOr<ImageHeader> ReadImageHeader(absl::string_view bytes);

}  // namespace ditserve::imaging
