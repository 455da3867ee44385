#include "worker/image_output.h"

#include "absl/strings/str_cat.h"
#include "worker/png_encoder.h"

namespace ditserve::worker {

absl::StatusOr<std::string> EncodeImage(const torch::Tensor& image, ditserve::v1::OutputFormat format,
                                        const std::vector<std::pair<std::string, std::string>>& text) {
  if (image.dim() != 3 || image.size(2) != 3) {
    return absl::InternalError("EncodeImage expects an (H, W, 3) image");
  }
  torch::Tensor f32 = image.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const auto height = static_cast<uint32_t>(f32.size(0));
  const auto width = static_cast<uint32_t>(f32.size(1));
  switch (format) {
    case ditserve::v1::OUTPUT_FORMAT_UNSPECIFIED:
    case ditserve::v1::OUTPUT_FORMAT_PNG: {
      torch::Tensor u8 = (f32 * 255).round().clamp(0, 255).to(torch::kUInt8).contiguous();
      return EncodePng(u8.data_ptr<uint8_t>(), height, width, text);
    }
    case ditserve::v1::OUTPUT_FORMAT_RAW_F32:
      return std::string(static_cast<const char*>(f32.data_ptr()),
                         static_cast<size_t>(f32.numel()) * sizeof(float));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("output_format ", static_cast<int>(format), " is not an image format"));
  }
}

}  // namespace ditserve::worker
