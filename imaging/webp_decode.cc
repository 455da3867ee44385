// WebP through Debian's libwebp: RGBA output (what Pillow's WebPAnimDecoder asks for), alpha
// dropped; the EXIF chunk through libwebpdemux, as Pillow reads it. Animations are refused.
#include <webp/decode.h>
#include <webp/demux.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/decoders.h"

namespace ditserve::imaging::internal {
namespace {

const char* StatusName(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (truncated file)";
  }
  return "unknown error";
}

std::string ExifChunk(absl::string_view bytes) {
  WebPData data{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  WebPDemuxer* demux = WebPDemux(&data);
  if (demux == nullptr) return "";
  std::string exif;
  WebPChunkIterator chunk;
  if (WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
    exif.assign(reinterpret_cast<const char*>(chunk.chunk.bytes), chunk.chunk.size);
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  WebPDemuxDelete(demux);
  return exif;
}

}  // namespace

absl::StatusOr<RawDecode> DecodeWebp(absl::string_view bytes, const DecodeLimits& limits) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return absl::InternalError("WebP: library version mismatch");
  VP8StatusCode code = WebPGetFeatures(data, bytes.size(), &config.input);
  if (code != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(absl::StrCat("WebP: ", StatusName(code)));
  }
  if (config.input.has_animation) {
    return absl::InvalidArgumentError("WebP: animated images are not supported");
  }
  const int width = config.input.width;
  const int height = config.input.height;
  if (width < 1 || height < 1) return absl::InvalidArgumentError("WebP: empty image");
  RETURN_IF_ERROR(CheckLimits(static_cast<uint32_t>(width), static_cast<uint32_t>(height), limits,
                              ImageFormat::kWebp));
  const size_t stride = static_cast<size_t>(width) * 4;
  std::vector<uint8_t> rgba(stride * height);
  config.output.colorspace = MODE_RGBA;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = rgba.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = rgba.size();
  code = WebPDecode(data, bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (code != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(absl::StrCat("WebP: ", StatusName(code)));
  }
  RawDecode out;
  out.image = MakeRgbImage(width, height);
  const size_t pixels = static_cast<size_t>(width) * height;
  for (size_t i = 0; i < pixels; ++i) {
    out.image.pixels[i * 3 + 0] = rgba[i * 4 + 0];
    out.image.pixels[i * 3 + 1] = rgba[i * 4 + 1];
    out.image.pixels[i * 3 + 2] = rgba[i * 4 + 2];
  }
  out.exif = ExifChunk(bytes);
  return out;
}

}  // namespace ditserve::imaging::internal
