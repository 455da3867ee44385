// The 8-bit RGB image every image input becomes (decode.h) and the resampler works on
// (resample.h): what diffusers' pipelines hold after PIL's `convert("RGB")`.
//
// Contract: `pixels` holds exactly width * height * 3 bytes, rows top to bottom, each row left to
// right, each pixel R, G, B (no padding, no alpha). width and height are both > 0 for every image
// this library returns. A plain value type: copy freely; not synchronised (one writer at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ditserve::imaging {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3, interleaved RGB

  // Byte offset of pixel (x, y)'s R sample.
  size_t Offset(int x, int y) const {
    return (static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3;
  }
  size_t RowBytes() const { return static_cast<size_t>(width) * 3; }
};

// An image of the given size, every byte 0 (callers check width, height > 0 and the limits first).
inline RgbImage MakeRgbImage(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.assign(static_cast<size_t>(width) * static_cast<size_t>(height) * 3, 0);
  return image;
}

}  // namespace ditserve::imaging
