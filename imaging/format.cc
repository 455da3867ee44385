#include "imaging/format.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::imaging {
namespace {

constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";

uint8_t At(absl::string_view b, size_t i) { return static_cast<uint8_t>(b[i]); }
uint32_t Be16(absl::string_view b, size_t i) { return (At(b, i) << 8) | At(b, i + 1); }
uint32_t Be32(absl::string_view b, size_t i) {
  return (uint32_t{At(b, i)} << 24) | (At(b, i + 1) << 16) | (At(b, i + 2) << 8) | At(b, i + 3);
}
uint32_t Le16(absl::string_view b, size_t i) { return At(b, i) | (At(b, i + 1) << 8); }
uint32_t Le24(absl::string_view b, size_t i) {
  return At(b, i) | (At(b, i + 1) << 8) | (At(b, i + 2) << 16);
}

absl::Status Truncated(ImageFormat format) {
  return absl::InvalidArgumentError(
      absl::StrCat(ImageFormatName(format), ": header is truncated"));
}

absl::StatusOr<ImageHeader> PngHeader(absl::string_view b) {
  // signature (8), IHDR length (4), "IHDR" (4), width (4), height (4)
  if (b.size() < 24) return Truncated(ImageFormat::kPng);
  if (b.substr(12, 4) != "IHDR" || Be32(b, 8) != 13) {
    return absl::InvalidArgumentError("PNG: the first chunk is not a 13-byte IHDR");
  }
  return ImageHeader{ImageFormat::kPng, Be32(b, 16), Be32(b, 20)};
}

bool IsSof(uint8_t marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

absl::StatusOr<ImageHeader> JpegHeader(absl::string_view b) {
  size_t pos = 2;  // after SOI
  while (true) {
    // Like libjpeg's next_marker: skip anything up to a 0xFF, then fill bytes.
    while (pos < b.size() && At(b, pos) != 0xFF) ++pos;
    while (pos < b.size() && At(b, pos) == 0xFF) ++pos;
    if (pos >= b.size()) return Truncated(ImageFormat::kJpeg);
    const uint8_t marker = At(b, pos++);
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
    if (marker == 0xD9 || marker == 0xDA) {
      return absl::InvalidArgumentError("JPEG: no frame header (SOF) before the image data");
    }
    if (pos + 2 > b.size()) return Truncated(ImageFormat::kJpeg);
    const uint32_t length = Be16(b, pos);
    if (length < 2) return absl::InvalidArgumentError("JPEG: bad marker segment length");
    if (IsSof(marker)) {
      // length (2), precision (1), height (2), width (2)
      if (pos + 7 > b.size()) return Truncated(ImageFormat::kJpeg);
      return ImageHeader{ImageFormat::kJpeg, Be16(b, pos + 5), Be16(b, pos + 3)};
    }
    pos += length;
  }
}

absl::StatusOr<ImageHeader> WebpHeader(absl::string_view b) {
  // "RIFF" size "WEBP", then the first chunk: fourcc (4), size (4), payload.
  if (b.size() < 30) return Truncated(ImageFormat::kWebp);
  const absl::string_view fourcc = b.substr(12, 4);
  if (fourcc == "VP8X") {
    // flags (4), canvas width - 1 (3), canvas height - 1 (3)
    return ImageHeader{ImageFormat::kWebp, Le24(b, 24) + 1, Le24(b, 27) + 1};
  }
  if (fourcc == "VP8 ") {
    // frame tag (3), start code 9d 01 2a, width (14 bits + scale), height (14 bits + scale)
    if (At(b, 23) != 0x9d || At(b, 24) != 0x01 || At(b, 25) != 0x2a) {
      return absl::InvalidArgumentError("WebP: bad VP8 start code");
    }
    return ImageHeader{ImageFormat::kWebp, Le16(b, 26) & 0x3fff, Le16(b, 28) & 0x3fff};
  }
  if (fourcc == "VP8L") {
    // signature 0x2f, then width - 1 (14 bits) and height - 1 (14 bits), little-endian bits
    if (At(b, 20) != 0x2f) return absl::InvalidArgumentError("WebP: bad VP8L signature");
    const uint32_t bits = At(b, 21) | (At(b, 22) << 8) | (At(b, 23) << 16) |
                          (uint32_t{At(b, 24)} << 24);
    return ImageHeader{ImageFormat::kWebp, (bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("WebP: unexpected first chunk '", absl::CHexEscape(fourcc), "'"));
}

}  // namespace

absl::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kWebp: return "WebP";
  }
  return "?";
}

absl::StatusOr<ImageFormat> SniffImageFormat(absl::string_view bytes) {
  if (bytes.size() >= 8 && bytes.substr(0, 8) == absl::string_view(kPngSignature, 8)) {
    return ImageFormat::kPng;
  }
  if (bytes.size() >= 3 && At(bytes, 0) == 0xFF && At(bytes, 1) == 0xD8 && At(bytes, 2) == 0xFF) {
    return ImageFormat::kJpeg;
  }
  if (bytes.size() >= 12 && bytes.substr(0, 4) == "RIFF" && bytes.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return absl::InvalidArgumentError(
      "not an image in an accepted format (PNG, JPEG or WebP are accepted)");
}

absl::StatusOr<ImageHeader> ReadImageHeader(absl::string_view bytes) {
  ASSIGN_OR_RETURN(const ImageFormat format, SniffImageFormat(bytes));
  absl::StatusOr<ImageHeader> header;
  switch (format) {
    case ImageFormat::kPng: header = PngHeader(bytes); break;
    case ImageFormat::kJpeg: header = JpegHeader(bytes); break;
    case ImageFormat::kWebp: header = WebpHeader(bytes); break;
  }
  if (header.ok() && (header->width == 0 || header->height == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ImageFormatName(format), ": header claims an empty image (",
                     header->width, "x", header->height, ")"));
  }
  return header;
}

}  // namespace ditserve::imaging
