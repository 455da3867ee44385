#include "worker/webp_encoder.h"

#include <webp/encode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ditserve::worker {

absl::StatusOr<std::string> EncodeWebp(const uint8_t* rgb, uint32_t height, uint32_t width,
                                       uint32_t quality) {
  if (height == 0 || width == 0) return absl::InvalidArgumentError("WebP: empty image");
  if (height > kMaxWebpSide || width > kMaxWebpSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("WebP: ", width, "x", height, " is over WebP's largest side ", kMaxWebpSide));
  }
  uint8_t* output = nullptr;
  const size_t size = WebPEncodeRGB(rgb, static_cast<int>(width), static_cast<int>(height),
                                    static_cast<int>(width) * 3,
                                    static_cast<float>(std::min<uint32_t>(quality, 100)), &output);
  if (size == 0 || output == nullptr) {
    WebPFree(output);
    return absl::InternalError("WebP: libwebp failed while encoding");
  }
  std::string out(reinterpret_cast<const char*>(output), size);
  WebPFree(output);
  return out;
}

}  // namespace ditserve::worker
