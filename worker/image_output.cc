#include "worker/image_output.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "worker/jpeg_encoder.h"
#include "worker/png_encoder.h"
#include "worker/webp_encoder.h"

namespace ditserve::worker {
namespace {

// The image as a contiguous float32 CPU tensor (throws what LibTorch throws).
torch::Tensor HostFloat32(const torch::Tensor& image) {
  return image.detach().to(torch::kCPU, torch::kFloat32).contiguous();
}

// The 8-bit pixels every 8-bit format encodes, rounded as diffusers' numpy_to_pil does.
absl::StatusOr<torch::Tensor> Rgb8(const torch::Tensor& image, const char* what) {
  return GuardTorch(what, [&] {
    return (HostFloat32(image) * 255).round().clamp(0, 255).to(torch::kUInt8).contiguous();
  });
}

}  // namespace

absl::StatusOr<std::string> EncodeImage(const torch::Tensor& image, ditserve::v1::OutputFormat format,
                                        const std::vector<std::pair<std::string, std::string>>& text,
                                        uint32_t quality) {
  if (image.dim() != 3 || image.size(2) != 3) {
    return absl::InternalError("EncodeImage expects an (H, W, 3) image");
  }
  switch (format) {
    case ditserve::v1::OUTPUT_FORMAT_UNSPECIFIED:
    case ditserve::v1::OUTPUT_FORMAT_PNG: {
      ASSIGN_OR_RETURN(const torch::Tensor u8, Rgb8(image, "encoding a PNG image"));
      return EncodePng(u8.data_ptr<uint8_t>(), static_cast<uint32_t>(u8.size(0)),
                       static_cast<uint32_t>(u8.size(1)), text);
    }
    case ditserve::v1::OUTPUT_FORMAT_JPEG: {
      ASSIGN_OR_RETURN(const torch::Tensor u8, Rgb8(image, "encoding a JPEG image"));
      return EncodeJpeg(u8.data_ptr<uint8_t>(), static_cast<uint32_t>(u8.size(0)),
                        static_cast<uint32_t>(u8.size(1)), quality, text);
    }
    case ditserve::v1::OUTPUT_FORMAT_WEBP: {
      ASSIGN_OR_RETURN(const torch::Tensor u8, Rgb8(image, "encoding a WebP image"));
      return EncodeWebp(u8.data_ptr<uint8_t>(), static_cast<uint32_t>(u8.size(0)),
                        static_cast<uint32_t>(u8.size(1)), quality);
    }
    case ditserve::v1::OUTPUT_FORMAT_RAW_F32:
      return GuardTorch("encoding a raw image", [&] {
        const torch::Tensor f32 = HostFloat32(image);
        return std::string(static_cast<const char*>(f32.data_ptr()),
                           static_cast<size_t>(f32.numel()) * sizeof(float));
      });
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("output_format ", static_cast<int>(format), " is not an image format"));
  }
}

}  // namespace ditserve::worker
