#include "tests/support/smooth_images.h"

#include <gtest/gtest.h>
#include <png.h>

#include <vector>

namespace ditserve::testing {

torch::Tensor SmoothRandomImage(int64_t height, int64_t width, uint64_t seed, int64_t cell) {
  torch::manual_seed(seed);
  torch::Tensor coarse = torch::rand({1, 3, (height + cell - 1) / cell, (width + cell - 1) / cell});
  torch::Tensor up =
      torch::nn::functional::interpolate(coarse, torch::nn::functional::InterpolateFuncOptions()
                                                     .size(std::vector<int64_t>{height, width})
                                                     .mode(torch::kBilinear)
                                                     .align_corners(false));
  return (up[0].permute({1, 2, 0}) * 255).round().clamp(0, 255).to(torch::kUInt8).contiguous();
}

std::string WriteSmoothPng(const std::string& path, int width, int height, uint64_t seed) {
  torch::Tensor px = SmoothRandomImage(height, width, seed, 8);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  EXPECT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, px.data_ptr(), 0, nullptr)) << path;
  return path;
}

}  // namespace ditserve::testing
