// The worker's result image encoders (worker/png_encoder.h, jpeg_encoder.h, webp_encoder.h): each
// file decodes (with imaging/decode.h, the frontend's decoders) to the size and, within the
// format's loss, the pixels encoded; JPEG and WebP follow their quality; JPEG carries the
// generation parameters as a COM marker.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "imaging/decode.h"
#include "worker/jpeg_encoder.h"
#include "worker/png_encoder.h"
#include "worker/webp_encoder.h"

namespace ditserve::worker {
namespace {

constexpr uint32_t kWidth = 96;
constexpr uint32_t kHeight = 64;

// A smooth gradient with a soft circle: what lossy encoders keep well.
std::vector<uint8_t> Picture() {
  std::vector<uint8_t> rgb(kWidth * kHeight * 3);
  for (uint32_t y = 0; y < kHeight; ++y) {
    for (uint32_t x = 0; x < kWidth; ++x) {
      uint8_t* p = &rgb[(y * kWidth + x) * 3];
      const double d = std::hypot(x - 48.0, y - 32.0);
      p[0] = static_cast<uint8_t>(x * 255 / (kWidth - 1));
      p[1] = static_cast<uint8_t>(y * 255 / (kHeight - 1));
      p[2] = static_cast<uint8_t>(d < 20 ? 220 : 40);
    }
  }
  return rgb;
}

// Mean absolute difference per sample between the decoded image and `rgb`.
double MeanError(const imaging::RgbImage& image, const std::vector<uint8_t>& rgb) {
  double sum = 0;
  for (size_t i = 0; i < rgb.size(); ++i) sum += std::abs(int{image.pixels[i]} - int{rgb[i]});
  return sum / static_cast<double>(rgb.size());
}

imaging::DecodedImage Decode(const std::string& bytes, imaging::ImageFormat format) {
  auto decoded = imaging::DecodeImage(bytes);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  if (!decoded.ok()) return {};
  EXPECT_EQ(decoded->format, format);
  EXPECT_EQ(decoded->image.width, static_cast<int>(kWidth));
  EXPECT_EQ(decoded->image.height, static_cast<int>(kHeight));
  return *std::move(decoded);
}

TEST(ImageEncoders, PngIsLossless) {
  const auto rgb = Picture();
  auto png = EncodePng(rgb.data(), kHeight, kWidth, {{"prompt", "a cat"}});
  ASSERT_TRUE(png.ok()) << png.status();
  const auto decoded = Decode(*png, imaging::ImageFormat::kPng);
  EXPECT_EQ(decoded.image.pixels, rgb);
}

// The PNG encoder filters and deflates the image in strips of rows on threads of their own, one
// zlib stream across them: every layout of strips (one row; a strip's height and one more; the
// eight-strip cap with uneven strips; one column) decodes to exactly the pixels, with every
// compression setting, and the bytes do not depend on the run (the strips follow the height only).
TEST(ImageEncoders, PngIsLosslessAtEveryStripLayout) {
  std::mt19937 rng(11);
  const std::pair<uint32_t, uint32_t> sizes[] = {
      {1, 1}, {1, 7}, {5, 1}, {127, 33}, {128, 64}, {129, 65}, {300, 97}, {1030, 41}, {2048, 16}};
  const PngCompression settings[] = {{}, {-1, -1}, {1, -1}, {9, 0}};
  for (const auto& [height, width] : sizes) {
    // Half noise, half a smooth ramp: both the filters' and the deflater's paths.
    std::vector<uint8_t> rgb(static_cast<size_t>(height) * width * 3);
    for (size_t i = 0; i < rgb.size(); ++i) {
      rgb[i] = i < rgb.size() / 2 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(i / 7);
    }
    for (const PngCompression& c : settings) {
      SCOPED_TRACE(::testing::Message()
                   << height << "x" << width << " level " << c.level << " strategy " << c.strategy);
      auto png = EncodePng(rgb.data(), height, width, {{"prompt", "strips"}}, c);
      ASSERT_TRUE(png.ok()) << png.status();
      EXPECT_TRUE(absl::StrContains(*png, std::string("tEXtprompt\0strips", 17)));
      auto decoded = imaging::DecodeImage(*png);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ASSERT_EQ(decoded->image.height, static_cast<int>(height));
      ASSERT_EQ(decoded->image.width, static_cast<int>(width));
      EXPECT_EQ(decoded->image.pixels, rgb);
      auto again = EncodePng(rgb.data(), height, width, {{"prompt", "strips"}}, c);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, *png);
    }
  }
}

TEST(ImageEncoders, JpegDecodesCloseAndCarriesTheParameters) {
  const auto rgb = Picture();
  auto jpeg = EncodeJpeg(rgb.data(), kHeight, kWidth, 100, {{"prompt", "a cat"}, {"seed", "7"}});
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  ASSERT_GE(jpeg->size(), 4u);
  EXPECT_EQ(jpeg->substr(0, 3), "\xFF\xD8\xFF");                      // SOI + a marker
  EXPECT_EQ(jpeg->substr(jpeg->size() - 2), "\xFF\xD9");              // EOI
  EXPECT_TRUE(absl::StrContains(*jpeg, "prompt: a cat\nseed: 7\n"));  // the COM marker
  const auto decoded = Decode(*jpeg, imaging::ImageFormat::kJpeg);
  EXPECT_LT(MeanError(decoded.image, rgb), 3.0);
  // Lower quality: a smaller file, still the picture.
  auto small = EncodeJpeg(rgb.data(), kHeight, kWidth, 10, {});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_LT(small->size(), jpeg->size());
  EXPECT_LT(MeanError(Decode(*small, imaging::ImageFormat::kJpeg).image, rgb), 20.0);
  EXPECT_TRUE(EncodeJpeg(rgb.data(), kHeight, kWidth, 0, {}).ok());  // 0 acts as 1
}

TEST(ImageEncoders, WebpDecodesCloseAndFollowsItsQuality) {
  const auto rgb = Picture();
  auto webp = EncodeWebp(rgb.data(), kHeight, kWidth, 100);
  ASSERT_TRUE(webp.ok()) << webp.status();
  EXPECT_EQ(webp->substr(0, 4), "RIFF");
  EXPECT_EQ(webp->substr(8, 4), "WEBP");
  const auto decoded = Decode(*webp, imaging::ImageFormat::kWebp);
  EXPECT_LT(MeanError(decoded.image, rgb), 4.0);
  auto small = EncodeWebp(rgb.data(), kHeight, kWidth, 5);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_LT(small->size(), webp->size());
  EXPECT_LT(MeanError(Decode(*small, imaging::ImageFormat::kWebp).image, rgb), 20.0);
}

TEST(ImageEncoders, RefuseEmptyAndOversizedImages) {
  const auto rgb = Picture();
  EXPECT_EQ(EncodeJpeg(rgb.data(), 0, kWidth, 90, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeWebp(rgb.data(), kHeight, 0, 90).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeWebp(rgb.data(), kMaxWebpSide + 1, 1, 90).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ditserve::worker
