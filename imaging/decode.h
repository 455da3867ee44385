// Image inputs (reference images, image-to-image, /v1/images/edits) decoded into the RGB pixels
// diffusers' pipelines receive from `diffusers.utils.load_image`: PIL.Image.open, then
// ImageOps.exif_transpose, then convert("RGB") (Pillow 9.4, Debian 12's python3-pil, is the
// reference the unit tests compare with, pixel for pixel).
//
// EXIF orientation is applied by default: load_image applies it, and a user who passes their own
// PIL image opened from a file without exif_transpose gets the stored orientation instead (set
// `apply_exif_orientation = false` for that). Only the EXIF Orientation tag is read (JPEG APP1
// "Exif", PNG eXIf, WebP EXIF chunk); Pillow's fallbacks to a PNG "Raw profile type exif" text
// chunk or an XMP tiff:Orientation are not.
//
// Per stored mode, convert("RGB") as Pillow does it:
//   PNG gray 1/2/4/8-bit: replicated (1-bit 0/255, 2-bit x85, 4-bit x17); gray 16-bit: Pillow
//   opens it as mode "I" and converts by clipping the 16-bit value to 0..255 (so most values
//   become 255), reproduced; gray+alpha, RGB, RGBA at 8 or 16 bits: the high byte of each
//   sample, alpha dropped (no compositing); palette: the PLTE colour of each index, indices past
//   the PLTE's entries take Pillow's default grey ramp (index i -> (i, i, i)); tRNS ignored.
//   PNG gamma (gAMA, sRGB, iCCP) is not applied (Pillow does not).
//   JPEG: libjpeg-turbo with Pillow's settings (the library defaults: islow IDCT, fancy
//   upsampling), 3 components -> libjpeg's RGB, 1 -> grey replicated, 4 (CMYK or YCCK, Adobe
//   inverted polarity as Pillow assumes) -> Pillow's CMYK -> RGB rule: on the samples libjpeg
//   returns, r = k - (255 - c) * k / 255 with Pillow's MULDIV255 rounding (likewise g, b).
//   ICC profiles are ignored (Pillow ignores them too unless asked).
//   WebP: libwebp's RGBA output, alpha dropped. Animated WebP is refused.
//
// Safety: the format is sniffed and the header read (format.h) before any decoder runs; a width,
// height or pixel count above `limits` is refused there (INVALID_ARGUMENT), so no decompression
// bomb reaches a decoder, and each decoder re-checks the size it parses itself before it allocates.
// Corrupt, truncated or unsupported input is INVALID_ARGUMENT with the decoder's reason; libpng
// and libjpeg errors are caught with setjmp/longjmp in frames that hold no C++ objects with
// destructors.
// A JPEG whose data ends early (libjpeg would pad it with grey) is refused, as Pillow refuses it;
// so is one with more than 1000 scans (a CPU bomb; Pillow has no such limit). Thread-safe (no
// shared state).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "imaging/format.h"
#include "imaging/image.h"

namespace ditserve::imaging {

struct DecodeLimits {
  uint32_t max_width = 8192;
  uint32_t max_height = 8192;
  uint64_t max_pixels = uint64_t{4096} * 4096;
};

struct DecodeOptions {
  DecodeLimits limits;
  bool apply_exif_orientation = true;
};

struct DecodedImage {
  RgbImage image;               // after orientation
  ImageFormat format = ImageFormat::kPng;
  int exif_orientation = 1;     // the tag's value (1 when absent or not 1..8)
};

// INVALID_ARGUMENT when the size is empty or exceeds `limits` (the message names both).
absl::Status CheckLimits(uint32_t width, uint32_t height, const DecodeLimits& limits,
                         ImageFormat format);

// Sniff, read the header, check the limits, decode, convert to RGB, orient. See above.
absl::StatusOr<DecodedImage> DecodeImage(absl::string_view bytes,
                                         const DecodeOptions& options = {});

}  // namespace ditserve::imaging
