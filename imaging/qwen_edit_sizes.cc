#include "imaging/qwen_edit_sizes.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "imaging/python_round.h"
#include "imaging/resample.h"

namespace ditserve::imaging {
namespace {

absl::Status CheckSides(const ImageSize& size, int width, int height, absl::string_view what) {
  if (size.width < 1 || size.height < 1) {
    return absl::InvalidArgumentError(absl::StrCat("is ", width, "x", height, "; its ", what,
                                                   " size would be ", size.width, "x", size.height,
                                                   " (aspect ratio too extreme)"));
  }
  return absl::OkStatus();
}

}  // namespace

ImageSize QwenEditCalculateDimensions(int64_t target_area, int width, int height) {
  const double ratio = static_cast<double>(width) / static_cast<double>(height);
  const double w = std::sqrt(static_cast<double>(target_area) * ratio);
  const double h = w / ratio;
  ImageSize size;
  // Sides stay far below 2^31 for any image a decoder accepts (area * ratio < 2^62 here).
  size.width = static_cast<int>(RoundHalfEven(w / 32) * 32);
  size.height = static_cast<int>(RoundHalfEven(h / 32) * 32);
  return size;
}

absl::StatusOr<QwenEditImageSizes> QwenEditImageSizesFor(int width, int height, int vae_multiple,
                                                         int64_t condition_area) {
  if (width < 1 || height < 1 || vae_multiple < 1 || condition_area < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid image size ", width, "x", height, " or multiple ", vae_multiple));
  }
  QwenEditImageSizes sizes;
  sizes.condition = QwenEditCalculateDimensions(condition_area, width, height);
  if (auto s = CheckSides(sizes.condition, width, height, "condition"); !s.ok()) return s;
  const ImageSize vae = QwenEditCalculateDimensions(kQwenEditVaeArea, width, height);
  // VaeImageProcessor.get_default_height_width: x - x % vae_scale_factor.
  sizes.vae.width = vae.width - vae.width % vae_multiple;
  sizes.vae.height = vae.height - vae.height % vae_multiple;
  if (auto s = CheckSides(sizes.vae, width, height, "VAE"); !s.ok()) return s;
  return sizes;
}

absl::StatusOr<ImageSize> QwenEditOutputSize(int last_width, int last_height, int width, int height,
                                             int multiple_of) {
  if (last_width < 1 || last_height < 1 || width < 0 || height < 0 || multiple_of < 1) {
    return absl::InvalidArgumentError(absl::StrCat("invalid output size ", width, "x", height,
                                                   " for an image of ", last_width, "x",
                                                   last_height));
  }
  const ImageSize calculated =
      QwenEditCalculateDimensions(kQwenEditOutputArea, last_width, last_height);
  ImageSize size;
  size.width = width != 0 ? width : calculated.width;
  size.height = height != 0 ? height : calculated.height;
  size.width = size.width / multiple_of * multiple_of;
  size.height = size.height / multiple_of * multiple_of;
  if (size.width < 1 || size.height < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the output size would be ", size.width, "x", size.height, " (the last image is ",
        last_width, "x", last_height, "; each side must be at least ", multiple_of, ")"));
  }
  return size;
}

absl::StatusOr<RgbImage> PrepareQwenEditConditionImage(const RgbImage& image,
                                                       int64_t condition_area) {
  auto sizes = QwenEditImageSizesFor(image.width, image.height, 1, condition_area);
  if (!sizes.ok()) return sizes.status();
  return Resize(image, sizes->condition.width, sizes->condition.height, ResampleFilter::kLanczos);
}

absl::StatusOr<RgbImage> PrepareQwenEditVaeImage(const RgbImage& image, int vae_multiple) {
  auto sizes = QwenEditImageSizesFor(image.width, image.height, vae_multiple);
  if (!sizes.ok()) return sizes.status();
  return Resize(image, sizes->vae.width, sizes->vae.height, ResampleFilter::kLanczos);
}

}  // namespace ditserve::imaging
