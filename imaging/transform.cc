#include "imaging/transform.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ditserve::imaging {

absl::StatusOr<RgbImage> Crop(const RgbImage& image, int left, int top, int width, int height) {
  if (width < 1 || height < 1 || left < 0 || top < 0 || left > image.width - width ||
      top > image.height - height) {
    return absl::InvalidArgumentError(
        absl::StrCat("crop box (", left, ", ", top, ") + ", width, "x", height,
                     " is not inside the ", image.width, "x", image.height, " image"));
  }
  RgbImage out = MakeRgbImage(width, height);
  for (int y = 0; y < height; ++y) {
    std::memcpy(&out.pixels[out.Offset(0, y)], &image.pixels[image.Offset(left, top + y)],
                out.RowBytes());
  }
  return out;
}

absl::StatusOr<RgbImage> CenterCrop(const RgbImage& image, int width, int height) {
  if (width < 1 || height < 1 || width > image.width || height > image.height) {
    return absl::InvalidArgumentError(absl::StrCat("cannot centre-crop a ", image.width, "x",
                                                   image.height, " image to ", width, "x", height));
  }
  // Python's floor division; both operands are non-negative here.
  return Crop(image, (image.width - width) / 2, (image.height - height) / 2, width, height);
}

absl::StatusOr<RgbImage> CropToMultiple(const RgbImage& image, int multiple) {
  if (multiple < 1) return absl::InvalidArgumentError("crop multiple must be >= 1");
  const int width = image.width / multiple * multiple;
  const int height = image.height / multiple * multiple;
  if (width == 0 || height == 0) {
    return absl::InvalidArgumentError(absl::StrCat("a ", image.width, "x", image.height,
                                                   " image has no side of at least ", multiple,
                                                   " pixels to crop to"));
  }
  return CenterCrop(image, width, height);
}

RgbImage ApplyExifOrientation(const RgbImage& image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const bool swap = orientation >= 5;  // 5..8 exchange width and height
  const int out_w = swap ? image.height : image.width;
  const int out_h = swap ? image.width : image.height;
  RgbImage out = MakeRgbImage(out_w, out_h);
  const int w = image.width;
  const int h = image.height;
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      int sx = x;
      int sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; sy = y; break;          // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;  // ROTATE_180
        case 4: sx = x; sy = h - 1 - y; break;          // FLIP_TOP_BOTTOM
        case 5: sx = y; sy = x; break;                  // TRANSPOSE
        case 6: sx = y; sy = h - 1 - x; break;          // ROTATE_270 (counter-clockwise)
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;  // TRANSVERSE
        case 8: sx = w - 1 - y; sy = x; break;          // ROTATE_90 (counter-clockwise)
      }
      std::memcpy(&out.pixels[out.Offset(x, y)], &image.pixels[image.Offset(sx, sy)], 3);
    }
  }
  return out;
}

}  // namespace ditserve::imaging
