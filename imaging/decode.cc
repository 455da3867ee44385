#include "imaging/decode.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/decoders.h"
#include "imaging/exif.h"
#include "imaging/transform.h"

namespace ditserve::imaging {

absl::Status CheckLimits(uint32_t width, uint32_t height, const DecodeLimits& limits,
                         ImageFormat format) {
  if (width == 0 || height == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ImageFormatName(format), ": empty image (", width, "x", height, ")"));
  }
  if (width > limits.max_width || height > limits.max_height ||
      uint64_t{width} * height > limits.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(
        ImageFormatName(format), " image of ", width, "x", height, " exceeds the limits (",
        limits.max_width, "x", limits.max_height, ", ", limits.max_pixels, " pixels)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodedImage> DecodeImage(absl::string_view bytes, const DecodeOptions& options) {
  ASSIGN_OR_RETURN(const ImageHeader header, ReadImageHeader(bytes));
  RETURN_IF_ERROR(CheckLimits(header.width, header.height, options.limits, header.format));
  absl::StatusOr<internal::RawDecode> raw;
  switch (header.format) {
    case ImageFormat::kPng: raw = internal::DecodePng(bytes, options.limits); break;
    case ImageFormat::kJpeg: raw = internal::DecodeJpeg(bytes, options.limits); break;
    case ImageFormat::kWebp: raw = internal::DecodeWebp(bytes, options.limits); break;
  }
  RETURN_IF_ERROR(raw.status());
  DecodedImage out;
  out.format = header.format;
  out.exif_orientation = ExifOrientation(raw->exif);
  if (options.apply_exif_orientation && out.exif_orientation != 1) {
    out.image = ApplyExifOrientation(raw->image, out.exif_orientation);
  } else {
    out.image = std::move(raw->image);
  }
  return out;
}

}  // namespace ditserve::imaging
