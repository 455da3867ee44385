// imaging/: decoding and resampling against the real Pillow's outputs (tests/unit/data/imaging/,
// made by make_imaging_cases.py with Debian 12's Pillow 9.4), limits refused from the header,
// corrupt / truncated / unknown input refused with INVALID_ARGUMENT.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "imaging/decode.h"
#include "imaging/exif.h"
#include "imaging/format.h"
#include "imaging/resample.h"
#include "imaging/transform.h"

namespace ditserve::imaging {
namespace {

std::string DataDir() { return std::string(DITSERVE_SOURCE_DIR) + "/tests/unit/data/imaging/"; }

std::string ReadFile(const std::string& name) {
  std::ifstream in(DataDir() + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing " << name;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::vector<std::string>> Cases(absl::string_view kind) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(ReadFile("cases.txt"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields[0] == kind) out.push_back(fields);
  }
  return out;
}

// An .rgb file of the given size, or a .png decoded by the library (checked by the decode cases).
RgbImage LoadImage(const std::string& name, int width, int height) {
  if (name.size() > 4 && name.substr(name.size() - 4) == ".png") {
    auto decoded = DecodeImage(ReadFile(name));
    EXPECT_TRUE(decoded.ok()) << name << ": " << decoded.status();
    return decoded.ok() ? decoded->image : RgbImage{};
  }
  RgbImage image;
  image.width = width;
  image.height = height;
  const std::string bytes = ReadFile(name);
  image.pixels.assign(bytes.begin(), bytes.end());
  EXPECT_EQ(image.pixels.size(), static_cast<size_t>(width) * height * 3) << name;
  return image;
}

// "" when equal, else the size or the first difference and the largest absolute difference.
std::string Compare(const RgbImage& got, const RgbImage& want) {
  if (got.width != want.width || got.height != want.height) {
    return absl::StrCat("size ", got.width, "x", got.height, ", want ", want.width, "x",
                        want.height);
  }
  if (got.pixels.size() != want.pixels.size()) return "pixel buffer size";
  int max_diff = 0;
  size_t first = got.pixels.size();
  size_t count = 0;
  for (size_t i = 0; i < got.pixels.size(); ++i) {
    const int d = std::abs(int{got.pixels[i]} - int{want.pixels[i]});
    if (d != 0) {
      first = std::min(first, i);
      ++count;
      max_diff = std::max(max_diff, d);
    }
  }
  if (count == 0) return "";
  return absl::StrCat(count, " samples differ, max abs diff ", max_diff, ", first at pixel (",
                      (first / 3) % got.width, ", ", (first / 3) / got.width, ") channel ",
                      first % 3);
}

TEST(ImagingDecode, MatchesPillowForEveryCase) {
  const auto cases = Cases("decode");
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c[1]);
    const int width = std::stoi(c[2]);
    const int height = std::stoi(c[3]);
    const int orientation = std::stoi(c[5]);
    const std::string bytes = ReadFile(c[1]);
    auto decoded = DecodeImage(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->exif_orientation, orientation);
    EXPECT_EQ(Compare(decoded->image, LoadImage(c[4], width, height)), "");
    // Without exif_transpose: the stored orientation.
    DecodeOptions stored_options;
    stored_options.apply_exif_orientation = false;
    auto stored = DecodeImage(bytes, stored_options);
    ASSERT_TRUE(stored.ok()) << stored.status();
    const bool swapped = orientation >= 5 && orientation <= 8;
    EXPECT_EQ(Compare(stored->image, LoadImage(c[6], swapped ? height : width,
                                               swapped ? width : height)),
              "");
    // The header read before decoding claims the stored size.
    auto header = ReadImageHeader(bytes);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(static_cast<int>(header->width), stored->image.width);
    EXPECT_EQ(static_cast<int>(header->height), stored->image.height);
  }
}

// Damaged files (cut short, bad checksums): refused exactly where Pillow refuses them; the ones
// Pillow still decodes (bad IDAT checksum, no IEND) are among the decode cases above.
TEST(ImagingDecode, RefusesWhatPillowRefuses) {
  const auto cases = Cases("refuse");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    auto decoded = DecodeImage(ReadFile(c[1]));
    ASSERT_FALSE(decoded.ok()) << c[1] << " decoded, Pillow refuses it";
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
  }
}

TEST(ImagingDecode, FormatsAreSniffedFromTheBytes) {
  EXPECT_EQ(*SniffImageFormat(ReadFile("rgb_noise.png")), ImageFormat::kPng);
  EXPECT_EQ(*SniffImageFormat(ReadFile("q90_444.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(*SniffImageFormat(ReadFile("lossy.webp")), ImageFormat::kWebp);
  for (const std::string& junk : {std::string(), std::string("GIF89a\x01\0\x01\0", 10),
                                  std::string("BM6\0\0\0", 6), std::string(100, '\0'),
                                  std::string("RIFF\0\0\0\0WAVE", 12)}) {
    auto format = SniffImageFormat(junk);
    ASSERT_FALSE(format.ok());
    EXPECT_EQ(format.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(format.status().message().find("PNG, JPEG or WebP"), absl::string_view::npos)
        << format.status();
    EXPECT_EQ(DecodeImage(junk).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// Headers claiming a huge image with a tiny body: refused from the header, before any decoder.
std::string HugePng() {
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
  png += std::string("\x00\x01\x86\xa0\x00\x01\x86\xa0\x08\x02\x00\x00\x00", 13);  // 100000^2
  png += std::string("\0\0\0\0", 4);  // CRC (not checked before the limits)
  png += std::string("\0\0\0\x02IDAT\x78\x9c\0\0\0\0", 14);
  return png;
}

std::string HugeJpeg() {
  // SOI, SOF0 of 65000x65000 with 3 components, then EOI.
  std::string jpeg("\xff\xd8\xff\xc0\x00\x11\x08\xfd\xe8\xfd\xe8\x03", 12);
  jpeg += std::string("\x01\x22\x00\x02\x11\x01\x03\x11\x01", 9);
  jpeg += std::string("\xff\xd9", 2);
  return jpeg;
}

std::string HugeWebp() {
  // RIFF, VP8X with a 100000x100000 canvas, no image chunk.
  std::string webp("RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0", 24);
  const uint32_t side = 100000 - 1;
  for (int axis = 0; axis < 2; ++axis) {
    for (int i = 0; i < 3; ++i) webp += static_cast<char>((side >> (8 * i)) & 0xff);
  }
  return webp;
}

TEST(ImagingDecode, LimitsAreCheckedFromTheHeader) {
  for (const auto& [name, bytes] : {std::pair<std::string, std::string>{"png", HugePng()},
                                    {"jpeg", HugeJpeg()}, {"webp", HugeWebp()}}) {
    SCOPED_TRACE(name);
    auto header = ReadImageHeader(bytes);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_GE(header->width, 65000u);
    EXPECT_GE(header->height, 65000u);
    auto decoded = DecodeImage(bytes);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(decoded.status().message().find("exceeds the limits"), absl::string_view::npos)
        << decoded.status();
    // Even with roomy limits the tiny body is refused as corrupt, not decoded.
    DecodeOptions roomy;
    roomy.limits = {100000, 100000, uint64_t{100000} * 100000};
    EXPECT_EQ(DecodeImage(bytes, roomy).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // Each limit separately, on a real file (40x26).
  const std::string png = ReadFile("rgb_gradient.png");
  for (const DecodeLimits& limits : {DecodeLimits{39, 100, 10000}, DecodeLimits{100, 25, 10000},
                                     DecodeLimits{100, 100, 1039}}) {
    DecodeOptions options;
    options.limits = limits;
    EXPECT_EQ(DecodeImage(png, options).status().code(), absl::StatusCode::kInvalidArgument);
  }
  DecodeOptions exact;
  exact.limits = {40, 26, 1040};
  EXPECT_TRUE(DecodeImage(png, exact).ok());
}

TEST(ImagingDecode, CorruptAndTruncatedInputIsRefused) {
  for (const char* name : {"rgb_noise.png", "palette_trns.png", "rgb16.png", "q90_444.jpg",
                           "progressive.jpg", "cmyk.jpg", "lossy.webp", "lossless.webp",
                           "lossy_alpha.webp"}) {
    SCOPED_TRACE(name);
    const std::string bytes = ReadFile(name);
    // Every prefix: refused with INVALID_ARGUMENT or (past the image data) decoded; never a crash.
    for (size_t n = 0; n < bytes.size(); n += std::max<size_t>(1, bytes.size() / 97)) {
      auto decoded = DecodeImage(bytes.substr(0, n));
      if (!decoded.ok()) {
        EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
            << n << ": " << decoded.status();
      }
    }
    // Cut in the middle of the image data: refused.
    auto half = DecodeImage(bytes.substr(0, bytes.size() / 2));
    ASSERT_FALSE(half.ok()) << "half of " << name << " decoded";
    EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
    // Overwritten bytes past the header: any status but a crash; errors are INVALID_ARGUMENT.
    for (size_t at = 40; at < bytes.size(); at += 37) {
      std::string corrupt = bytes;
      for (size_t i = at; i < std::min(corrupt.size(), at + 8); ++i) corrupt[i] ^= 0x5a;
      auto decoded = DecodeImage(corrupt);
      if (!decoded.ok()) {
        EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
            << at << ": " << decoded.status();
      }
    }
  }
  // A PNG whose image data is garbage: libpng's reason comes back.
  std::string png = ReadFile("rgb_noise.png");
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  for (size_t i = idat + 4; i < idat + 40; ++i) png[i] = '\x55';
  auto decoded = DecodeImage(png);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("PNG: "), absl::string_view::npos);
}

ResampleFilter FilterNamed(const std::string& name) {
  auto filter = ResampleFilterFromName(name);
  EXPECT_TRUE(filter.ok()) << filter.status();
  return filter.ok() ? *filter : ResampleFilter::kLanczos;
}

TEST(ImagingResize, MatchesPillowForEveryCase) {
  const auto cases = Cases("resize");
  ASSERT_GE(cases.size(), 100u);
  int lanczos = 0;
  for (const auto& c : cases) {
    const std::string label = absl::StrCat(c[1], " ", c[4], " ", c[5], "x", c[6], " box ", c[7]);
    SCOPED_TRACE(label);
    const RgbImage source = LoadImage(c[1], std::stoi(c[2]), std::stoi(c[3]));
    const int width = std::stoi(c[5]);
    const int height = std::stoi(c[6]);
    std::optional<ResizeBox> box;
    if (c[7] != "-") {
      std::vector<std::string> v = absl::StrSplit(c[7], ',');
      ASSERT_EQ(v.size(), 4u);
      box = ResizeBox{std::stof(v[0]), std::stof(v[1]), std::stof(v[2]), std::stof(v[3])};
    }
    auto resized = Resize(source, width, height, FilterNamed(c[4]), box);
    ASSERT_TRUE(resized.ok()) << resized.status();
    EXPECT_EQ(Compare(*resized, LoadImage(c[8], width, height)), "");
    lanczos += c[4] == "lanczos";
  }
  EXPECT_GE(lanczos, 20);
}

TEST(ImagingResize, RefusesWhatPillowRefuses) {
  const RgbImage image = MakeRgbImage(10, 8);
  EXPECT_FALSE(Resize(image, 0, 5, ResampleFilter::kLanczos).ok());
  EXPECT_FALSE(Resize(image, 5, -1, ResampleFilter::kLanczos).ok());
  EXPECT_FALSE(Resize(image, 5, 5, ResampleFilter::kLanczos, ResizeBox{-1, 0, 5, 5}).ok());
  EXPECT_FALSE(Resize(image, 5, 5, ResampleFilter::kLanczos, ResizeBox{0, 0, 11, 5}).ok());
  EXPECT_FALSE(Resize(image, 5, 5, ResampleFilter::kLanczos, ResizeBox{4, 0, 3, 5}).ok());
  EXPECT_FALSE(Resize(image, 1 << 15, 1 << 15, ResampleFilter::kBilinear).ok());
  EXPECT_FALSE(ResampleFilterFromName("antialias").ok());
  EXPECT_EQ(*ResampleFilterFromName("linear"), ResampleFilter::kBilinear);
}

RgbImage Numbered(int width, int height) {
  RgbImage image = MakeRgbImage(width, height);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>(i);
  return image;
}

TEST(ImagingTransform, CropsAsDiffusersDoes) {
  const RgbImage image = Numbered(37, 21);
  // Flux2: (37 // 16) * 16 = 32, (21 // 16) * 16 = 16, centred: left (37 - 32) // 2 = 2,
  // top (21 - 16) // 2 = 2.
  auto cropped = CropToMultiple(image, 16);
  ASSERT_TRUE(cropped.ok()) << cropped.status();
  EXPECT_EQ(cropped->width, 32);
  EXPECT_EQ(cropped->height, 16);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 32; ++x) {
      ASSERT_EQ(cropped->pixels[cropped->Offset(x, y)], image.pixels[image.Offset(x + 2, y + 2)]);
    }
  }
  EXPECT_FALSE(CropToMultiple(Numbered(15, 40), 16).ok());
  EXPECT_FALSE(CenterCrop(image, 38, 10).ok());
  EXPECT_FALSE(Crop(image, 30, 0, 8, 5).ok());
  EXPECT_FALSE(Crop(image, 0, 0, 0, 5).ok());
  auto whole = Crop(image, 0, 0, 37, 21);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->pixels, image.pixels);
}

TEST(ImagingTransform, OrientationsComposeAsTheirInverses) {
  const RgbImage image = Numbered(5, 3);
  // 2, 3, 4, 5, 7 are their own inverses; 6 and 8 undo each other.
  for (int o : {2, 3, 4, 5, 7}) {
    EXPECT_EQ(ApplyExifOrientation(ApplyExifOrientation(image, o), o).pixels, image.pixels) << o;
  }
  EXPECT_EQ(ApplyExifOrientation(ApplyExifOrientation(image, 6), 8).pixels, image.pixels);
  EXPECT_EQ(ApplyExifOrientation(image, 6).width, 3);
  EXPECT_EQ(ApplyExifOrientation(image, 1).pixels, image.pixels);
  EXPECT_EQ(ApplyExifOrientation(image, 9).pixels, image.pixels);
}

TEST(ImagingExif, OrientationTag) {
  // Big-endian TIFF, one IFD0 entry: Orientation SHORT 1 = 6.
  const std::string mm("MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0", 22);
  EXPECT_EQ(ExifOrientation(mm), 6);
  EXPECT_EQ(ExifOrientation(std::string("Exif\0\0", 6) + mm), 6);
  // Little-endian, LONG.
  const std::string ii("II*\0\x08\0\0\0\x01\0\x12\x01\x04\0\x01\0\0\0\x03\0\0\0", 22);
  EXPECT_EQ(ExifOrientation(ii), 3);
  EXPECT_EQ(ExifOrientation(""), 1);
  EXPECT_EQ(ExifOrientation("Exif\0\0junk"), 1);
  EXPECT_EQ(ExifOrientation(mm.substr(0, 15)), 1);  // truncated entry
  std::string count2 = mm;
  count2[15] = 2;  // two values: not an orientation
  EXPECT_EQ(ExifOrientation(count2), 1);
  std::string bad_offset = mm;
  bad_offset[4] = '\x7f';
  EXPECT_EQ(ExifOrientation(bad_offset), 1);
}

}  // namespace
}  // namespace ditserve::imaging
