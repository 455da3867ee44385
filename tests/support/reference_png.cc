#include "tests/support/reference_png.h"

#include <gtest/gtest.h>
#include <png.h>

#include "tests/support/fixtures.h"

namespace ditserve::testing {

torch::Tensor DecodePng(const std::string& bytes) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) return {};
  image.format = PNG_FORMAT_RGB;
  torch::Tensor out = torch::empty({image.height, image.width, 3}, torch::kUInt8);
  if (!png_image_finish_read(&image, nullptr, out.data_ptr(), 0, nullptr)) return {};
  return out;
}

void ExpectPngMatchesReference(const std::string& png_bytes) {
  ExpectPngMatchesImage(png_bytes, Ref("flux1.image"));
}

void ExpectPngMatchesImage(const std::string& png_bytes, const torch::Tensor& reference) {
  torch::Tensor png = DecodePng(png_bytes);
  ASSERT_TRUE(png.defined()) << "not a PNG";
  ASSERT_TRUE(reference.defined());
  torch::Tensor ref = (reference.to(torch::kFloat32) * 255).round().to(torch::kInt32);
  ASSERT_EQ(png.sizes(), ref.sizes());
  EXPECT_LE((png.to(torch::kInt32) - ref).abs().max().item<int>(), 1);
}

}  // namespace ditserve::testing
