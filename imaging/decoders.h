// Internal to decode.cc: one decoder per format, each returning Pillow's convert("RGB") pixels of
// the stored image (no orientation) and the raw EXIF block it found (empty when none). Each checks
// the size its own parser reads against `limits` before allocating. Thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "imaging/decode.h"
#include "imaging/image.h"

namespace ditserve::imaging::internal {

struct RawDecode {
  RgbImage image;
  std::string exif;  // TIFF block, with or without the "Exif\0\0" prefix
};

absl::StatusOr<RawDecode> DecodePng(absl::string_view bytes, const DecodeLimits& limits);
absl::StatusOr<RawDecode> DecodeJpeg(absl::string_view bytes, const DecodeLimits& limits);
absl::StatusOr<RawDecode> DecodeWebp(absl::string_view bytes, const DecodeLimits& limits);

}  // namespace ditserve::imaging::internal
