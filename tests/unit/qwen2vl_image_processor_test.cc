// imaging/qwen2vl_image_processor.h and imaging/qwen_edit_sizes.h: the size rules against values
// worked out from the Python formulas (quoted below), the patch layout on an image whose pixels
// encode their coordinates, and torch's antialiased bicubic, pixel_values and the pipeline's chain
// against transformers 5.17.0 itself (data/qwen2vl_cases.txt, made by data/make_qwen2vl_cases.py
// on the GPU host's CPU: torch 2.11, torchvision 0.26).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "imaging/qwen2vl_image_processor.h"
#include "imaging/qwen_edit_sizes.h"
#include "imaging/resample.h"

#include "tests/support/imaging_cases.h"

namespace ditserve::imaging {
namespace {

using ditserve::testing::ImagingDataDir;
using ditserve::testing::PatternImage;
using ditserve::testing::ReadWholeFile;

// make_qwen2vl_cases.py's noise(w, h, seed): byte i is the top byte of the i-th LCG step.
RgbImage Noise(int w, int h, uint64_t seed) {
  RgbImage im = MakeRgbImage(w, h);
  uint64_t s = seed;
  for (uint8_t& b : im.pixels) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(s >> 56);
  }
  return im;
}

RgbImage Source(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, ':');
  std::vector<std::string> wh = absl::StrSplit(parts.at(1), 'x');
  const int w = std::stoi(wh.at(0));
  const int h = std::stoi(wh.at(1));
  if (parts[0] == "pattern") return PatternImage(w, h);
  return Noise(w, h, std::stoull(parts.at(2)));
}

std::string Fnv64(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::vector<std::vector<std::string>> Cases() {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(ReadWholeFile(ImagingDataDir() + "qwen2vl_cases.txt"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    out.push_back(absl::StrSplit(line, ' ', absl::SkipEmpty()));
  }
  return out;
}

// The processor settings the cases were made with (make_qwen2vl_cases.py's PREPROCESSOR_CONFIG:
// Qwen2.5-VL's preprocessor_config.json).
Qwen2VlImageConfig CaseConfig() {
  Qwen2VlImageConfig config;
  config.min_pixels = 3136;
  config.max_pixels = 12845056;
  return config;
}

ImageSize Size(int w, int h) {
  ImageSize s;
  s.width = w;
  s.height = h;
  return s;
}

// --- smart_resize (transformers 5.17.0, models/qwen2_vl/image_processing_qwen2_vl.py) ---
//   if max(height, width) / min(height, width) > 200: raise ValueError
//   h_bar = round(height / factor) * factor
//   w_bar = round(width / factor) * factor
//   if h_bar * w_bar > max_pixels:
//       beta = math.sqrt((height * width) / max_pixels)
//       h_bar = max(factor, math.floor(height / beta / factor) * factor)
//       w_bar = max(factor, math.floor(width / beta / factor) * factor)
//   elif h_bar * w_bar < min_pixels:
//       beta = math.sqrt(min_pixels / (height * width))
//       h_bar = math.ceil(height * beta / factor) * factor
//       w_bar = math.ceil(width * beta / factor) * factor
//   return h_bar, w_bar
TEST(Qwen2VlSmartResize, FollowsTheFormula) {
  struct Case {
    int w, h;
    int64_t max_pixels;
    ImageSize want;
  } cases[] = {
      // 50/28 = 1.79 -> 2; 70/28 = 2.5 -> 2 (ties to even): 56 x 56 = 3136, not below min.
      {70, 50, 12845056, Size(56, 56)},
      // 42/28 = 1.5 -> 2, 70/28 = 2.5 -> 2: both 56 (half-up would make the height 84).
      {42, 70, 12845056, Size(56, 56)},
      // 40/28 -> 1, 100/28 = 3.57 -> 4: 28 x 112 = 3136.
      {100, 40, 12845056, Size(112, 28)},
      // 28 x 28 < 3136: beta = sqrt(3136 / 713) = 2.097; ceil(23 * beta / 28) = 2, ceil(31 * beta /
      // 28) = 3.
      {31, 23, 12845056, Size(84, 56)},
      // The condition images' usual case: 384 / 28 = 13.7 -> 14.
      {384, 384, 12845056, Size(392, 392)},
      {480, 320, 12845056, Size(476, 308)},
      // Above max_pixels (the class default 28 * 28 * 1280): beta = sqrt(12e6 / 1003520) = 3.458;
      // floor(3000 / beta / 28) = 30, floor(4000 / beta / 28) = 41.
      {4000, 3000, 28 * 28 * 1280, Size(1148, 840)},
      // Qwen2.5-VL's max_pixels leaves it: 107 * 28 x 143 * 28.
      {4000, 3000, 12845056, Size(4004, 2996)},
      // Aspect ratio exactly 200 is allowed: h_bar = 0 -> the min branch, beta = sqrt(3136 / 200).
      {200, 1, 12845056, Size(812, 28)},
      // max(factor, ...): floor(28 / beta / 28) = 0 -> 28 (beta = sqrt(156800 / 50000)).
      {5600, 28, 50000, Size(3136, 28)},
      {1, 1, 12845056, Size(56, 56)},
  };
  for (const Case& c : cases) {
    auto got = Qwen2VlSmartResize(c.w, c.h, 28, 3136, c.max_pixels);
    ASSERT_TRUE(got.ok()) << c.w << "x" << c.h << ": " << got.status();
    EXPECT_EQ(got->width, c.want.width) << c.w << "x" << c.h;
    EXPECT_EQ(got->height, c.want.height) << c.w << "x" << c.h;
  }
  EXPECT_FALSE(Qwen2VlSmartResize(201, 1, 28, 3136, 12845056).ok());  // 201 > 200
  EXPECT_FALSE(Qwen2VlSmartResize(0, 5, 28, 3136, 12845056).ok());
}

// --- calculate_dimensions (diffusers 58eb52c0, pipeline_qwenimage_edit_plus.py) ---
//   width = math.sqrt(target_area * ratio); height = width / ratio
//   width = round(width / 32) * 32; height = round(height / 32) * 32
TEST(QwenEditSizes, CalculateDimensionsFollowsTheFormula) {
  // ratio 1.5: sqrt(147456 * 1.5) = 470.3 -> 15 * 32; 313.5 -> 10 * 32.
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditConditionArea, 300, 200), Size(480, 320));
  // sqrt(1048576 * 1.5) = 1254.1 -> 39 * 32; 836.1 -> 26 * 32.
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditVaeArea, 300, 200), Size(1248, 832));
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditConditionArea, 1920, 1080), Size(512, 288));
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditVaeArea, 1920, 1080), Size(1376, 768));
  // An exact tie: ratio 4225 / 4096 = (65 / 64)^2, sqrt(1048576 * ratio) = 1040 exactly, 1040 / 32
  // = 32.5 -> 32 (half to even; half-up would give 1056); 1008.2 / 32 = 31.5075 -> 32.
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditVaeArea, 4225, 4096), Size(1024, 1024));
  // 81 / 64: sqrt(147456 * 1.265625) = 432 exactly, 13.5 -> 14; 341.3 -> 11.
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditConditionArea, 81, 64), Size(448, 352));
  // Extreme ratio: height 30720 / 6400 = 4.8 -> round(0.15) = 0.
  EXPECT_EQ(QwenEditCalculateDimensions(kQwenEditConditionArea, 6400, 1), Size(30720, 0));
}

TEST(QwenEditSizes, ImageAndOutputSizes) {
  auto sizes = QwenEditImageSizesFor(300, 200, 16);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(sizes->condition, Size(480, 320));
  EXPECT_EQ(sizes->vae, Size(1248, 832));
  EXPECT_FALSE(QwenEditImageSizesFor(6400, 1, 16).ok());  // a side of 0: PIL refuses it too
  EXPECT_FALSE(QwenEditImageSizesFor(0, 10, 16).ok());

  // `height = height or calculated_height` per side, from the LAST image, then floored to 16.
  auto out = QwenEditOutputSize(200, 300, 0, 0, 16);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Size(832, 1248));
  out = QwenEditOutputSize(200, 300, 1000, 0, 16);  // 1000 // 16 * 16 = 992
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Size(992, 1248));
  out = QwenEditOutputSize(200, 300, 0, 520, 16);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Size(832, 512));
  EXPECT_FALSE(QwenEditOutputSize(200, 300, 15, 0, 16).ok());  // 15 // 16 = 0

  // The prepared images have those sizes (LANCZOS, resample.h; checked against Pillow there).
  auto cond = PrepareQwenEditConditionImage(PatternImage(300, 200));
  ASSERT_TRUE(cond.ok()) << cond.status();
  EXPECT_EQ(Size(cond->width, cond->height), Size(480, 320));
  auto vae = PrepareQwenEditVaeImage(PatternImage(300, 200), 16);
  ASSERT_TRUE(vae.ok()) << vae.status();
  EXPECT_EQ(Size(vae->width, vae->height), Size(1248, 832));
}

// The layout on a 56 x 84 image (a multiple of 28: no resize) whose R is x, G is y and B is 200,
// with mean 0, std 1 and rescale 1 so that each value is the raw sample.
TEST(Qwen2VlPatches, LayoutGroupsMergedPatches) {
  const int W = 56, H = 84, P = 14, T = 2, M = 2;
  RgbImage im = MakeRgbImage(W, H);
  for (int y = 0; y < H; ++y) {
    for (int x = 0; x < W; ++x) {
      uint8_t* p = &im.pixels[im.Offset(x, y)];
      p[0] = static_cast<uint8_t>(x);
      p[1] = static_cast<uint8_t>(y);
      p[2] = 200;
    }
  }
  Qwen2VlImageConfig config;
  config.rescale_factor = 1.0;
  config.image_mean = {0, 0, 0};
  config.image_std = {1, 1, 1};
  auto pv = Qwen2VlPreprocess({im}, config);
  ASSERT_TRUE(pv.ok()) << pv.status();
  const int gh = H / P, gw = W / P;  // 6 x 4
  ASSERT_EQ(pv->grid_thw.size(), 1u);
  EXPECT_EQ(pv->grid_thw[0], (std::array<int64_t, 3>{1, gh, gw}));
  EXPECT_EQ(pv->rows, gh * gw);
  EXPECT_EQ(pv->cols, 3 * T * P * P);
  EXPECT_EQ(Qwen2VlImageTokenCount(pv->grid_thw[0], M), gh * gw / 4);
  auto at = [&](int64_t row, int64_t col) { return pv->values[row * pv->cols + col]; };
  // Hand-placed: row 0 is the patch at (0, 0); row 1 the one right of it (mw = 1); row 2 the one
  // below it (mh = 1); row 4 starts the next 2 x 2 group, to the right (x = 28); the groups of a
  // group row come first: row 8 is x = 0, y = 28.
  EXPECT_EQ(at(0, 0), 0.0f);         // R at (0, 0)
  EXPECT_EQ(at(1, 0), 14.0f);        // R at (14, 0)
  EXPECT_EQ(at(2, 196 * 2), 14.0f);  // G (channel 1, frame 0: column 2 * 196) at (0, 14)
  EXPECT_EQ(at(3, 0), 14.0f);        // R at (14, 14)
  EXPECT_EQ(at(3, 196 * 2), 14.0f);  // G at (14, 14)
  EXPECT_EQ(at(4, 0), 28.0f);        // R at (28, 0)
  EXPECT_EQ(at(8, 196 * 2), 28.0f);  // G at (0, 28)
  EXPECT_EQ(at(0, 5), 5.0f);         // R at (5, 0): px = 5
  EXPECT_EQ(at(0, 14 * 3 + 2 * 196 + 0), 3.0f);  // G at (0, 3): py = 3
  EXPECT_EQ(at(0, 196), 0.0f);                   // frame 1 repeats frame 0
  EXPECT_EQ(at(23, 5 * 196 + 195), 200.0f);      // B, frame 1, last sample of the last patch
  // Every value, decoded from its row and column.
  for (int64_t r = 0; r < pv->rows; ++r) {
    const int mw = r % M, mh = (r / M) % M, bw = (r / (M * M)) % (gw / M),
              bh = static_cast<int>(r / (M * M * (gw / M)));
    for (int64_t col = 0; col < pv->cols; ++col) {
      const int px = col % P, py = (col / P) % P, c = static_cast<int>(col / (P * P * T));
      const int x = (bw * M + mw) * P + px, y = (bh * M + mh) * P + py;
      const float want = c == 0 ? x : c == 1 ? y : 200;
      ASSERT_EQ(at(r, col), want) << "row " << r << " col " << col;
    }
  }
}

TEST(Qwen2VlPatches, RefusesWhatIsNotAMultiple) {
  Qwen2VlPixelValues out;
  EXPECT_FALSE(Qwen2VlAppendPatches(MakeRgbImage(56, 42), Qwen2VlImageConfig(), &out).ok());
  EXPECT_FALSE(Qwen2VlPreprocess({}, Qwen2VlImageConfig()).ok());
  EXPECT_FALSE(ResizeTorchAntialias(MakeRgbImage(4, 4), 8, 8, ResampleFilter::kLanczos).ok());
}

// --- against transformers 5.17.0 (data/qwen2vl_cases.txt) ---

TEST(Qwen2VlAgainstTransformers, CasesWereMadeByTheTorchvisionBackend) {
  std::map<std::string, std::string> meta;
  for (const auto& c : Cases()) {
    if (c[0] == "meta" && c.size() >= 3) meta[c[1]] = c[2];
  }
  EXPECT_EQ(meta["transformers"], "5.17.0");
  EXPECT_EQ(meta["backend"], "torchvision");
  EXPECT_EQ(meta["resample"], "3");  // PILImageResampling.BICUBIC
}

TEST(Qwen2VlAgainstTransformers, TorchAntialiasedBicubicIsExact) {
  int checked = 0;
  for (const auto& c : Cases()) {
    if (c[0] != "resize") continue;
    const RgbImage source = Source(c[1]);
    const int w = std::stoi(c[2]), h = std::stoi(c[3]);
    auto out = ResizeTorchAntialias(source, w, h, ResampleFilter::kBicubic);
    ASSERT_TRUE(out.ok()) << c[1] << ": " << out.status();
    ASSERT_EQ(out->width, w);
    ASSERT_EQ(out->height, h);
    std::string detail;
    if (c.size() > 5) {
      int differ = 0, worst = 0;
      for (size_t i = 0; i < out->pixels.size(); ++i) {
        int want = 0;
        ASSERT_TRUE(absl::SimpleHexAtoi(c[5].substr(2 * i, 2), &want));
        const int d = std::abs(want - out->pixels[i]);
        differ += d != 0;
        worst = std::max(worst, d);
      }
      detail = " (" + std::to_string(differ) + " bytes differ, at most by " +
               std::to_string(worst) + ")";
    }
    EXPECT_EQ(Fnv64(out->pixels.data(), out->pixels.size()), c[4])
        << c[1] << " -> " << w << "x" << h << detail;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// One `process` case: the images through Qwen2VlPreprocess against pixel_values' hash, grids and
// samples.
void CheckProcess(const std::vector<std::string>& c, const std::vector<RgbImage>& images,
                  const std::multimap<std::string, std::vector<std::string>>& samples) {
  const size_t n = std::stoul(c[2]);
  ASSERT_EQ(images.size(), n);
  auto pv = Qwen2VlPreprocess(images, CaseConfig());
  ASSERT_TRUE(pv.ok()) << c[1] << ": " << pv.status();
  size_t k = 3 + n;
  ASSERT_EQ(c[k], "grid");
  ASSERT_EQ(pv->grid_thw.size(), n);
  for (size_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(pv->grid_thw[i][j], std::stoll(c[k + 1 + 3 * i + j])) << c[1] << " image " << i;
    }
    // The grid from the image's size alone (what the tokenizing ranks use) is transformers' too.
    auto grid = Qwen2VlGridThw(images[i].width, images[i].height, CaseConfig());
    ASSERT_TRUE(grid.ok()) << grid.status();
    EXPECT_EQ(*grid, pv->grid_thw[i]) << c[1] << " image " << i;
  }
  k += 1 + 3 * n;
  ASSERT_EQ(c[k], "rows");
  EXPECT_EQ(pv->rows, std::stoll(c[k + 1]));
  EXPECT_EQ(pv->cols, std::stoll(c[k + 3]));
  std::vector<uint8_t> bytes(pv->values.size() * 4);
  std::memcpy(bytes.data(), pv->values.data(), bytes.size());  // float32, little-endian (x86)
  EXPECT_EQ(Fnv64(bytes.data(), bytes.size()), c[k + 4]) << c[1];
  auto range = samples.equal_range(c[1]);
  int seen = 0;
  for (auto it = range.first; it != range.second; ++it, ++seen) {
    const int64_t row = std::stoll(it->second[2]), col = std::stoll(it->second[3]);
    ASSERT_LT(row * pv->cols + col, static_cast<int64_t>(pv->values.size()));
    uint32_t want = 0;
    ASSERT_TRUE(absl::SimpleHexAtoi(it->second[4], &want));
    float want_f;
    std::memcpy(&want_f, &want, 4);
    EXPECT_EQ(pv->values[row * pv->cols + col], want_f) << c[1] << " row " << row << " col " << col;
  }
  EXPECT_GT(seen, 0) << c[1];
}

TEST(Qwen2VlAgainstTransformers, PixelValuesAreExact) {
  const auto cases = Cases();
  std::multimap<std::string, std::vector<std::string>> samples;
  for (const auto& c : cases) {
    if (c[0] == "sample") samples.emplace(c[1], c);
  }
  int checked = 0;
  for (const auto& c : cases) {
    if (c[0] != "process" || absl::StartsWith(c[1], "chain:")) continue;
    std::vector<RgbImage> images;
    for (size_t i = 0; i < std::stoul(c[2]); ++i) images.push_back(Source(c[3 + i]));
    CheckProcess(c, images, samples);
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// The pipeline's chain for one image: calculate_dimensions' sizes, the LANCZOS condition image,
// the processor.
TEST(Qwen2VlAgainstTransformers, EditPlusChainIsExact) {
  const auto cases = Cases();
  std::multimap<std::string, std::vector<std::string>> samples;
  std::map<std::string, std::vector<std::string>> process;
  for (const auto& c : cases) {
    if (c[0] == "sample") samples.emplace(c[1], c);
    if (c[0] == "process") process[c[1]] = c;
  }
  int checked = 0;
  for (const auto& c : cases) {
    if (c[0] != "chain") continue;
    // chain <source> cond <w> <h> vae <w> <h> out <w> <h>
    const RgbImage source = Source(c[1]);
    auto sizes = QwenEditImageSizesFor(source.width, source.height, 16);
    ASSERT_TRUE(sizes.ok()) << sizes.status();
    EXPECT_EQ(sizes->condition, Size(std::stoi(c[3]), std::stoi(c[4]))) << c[1];
    EXPECT_EQ(sizes->vae, Size(std::stoi(c[6]), std::stoi(c[7]))) << c[1];
    auto out = QwenEditOutputSize(source.width, source.height, 0, 0, 16);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, Size(std::stoi(c[9]), std::stoi(c[10]))) << c[1];
    auto cond = PrepareQwenEditConditionImage(source);
    ASSERT_TRUE(cond.ok()) << cond.status();
    auto it = process.find("chain:" + c[1]);
    ASSERT_NE(it, process.end()) << c[1];
    CheckProcess(it->second, {*cond}, samples);
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace ditserve::imaging
