// imaging/preprocess.h against Pillow running diffusers' steps (data/preprocess_cases.txt, made by
// data/make_preprocess_cases.py): FLUX.2 reference images (check, area resize, crop to the
// multiple), FLUX.1 image-to-image (resize to the output size) and Kontext (the preferred
// resolution nearest the aspect ratio), pixel for pixel (by hash).
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "imaging/decode.h"
#include "imaging/preprocess.h"
#include "tests/support/imaging_cases.h"

namespace ditserve::imaging {
namespace {

using ditserve::testing::ImagingDataDir;
using ditserve::testing::PatternImage;
using ditserve::testing::ReadWholeFile;

RgbImage Source(const std::string& name) {
  if (absl::StartsWith(name, "pattern:")) {
    std::vector<std::string> wh = absl::StrSplit(name.substr(8), 'x');
    return PatternImage(std::stoi(wh[0]), std::stoi(wh[1]));
  }
  auto decoded = DecodeImage(ReadWholeFile(ImagingDataDir() + name));
  EXPECT_TRUE(decoded.ok()) << name << ": " << decoded.status();
  return decoded.ok() ? decoded->image : RgbImage();
}

std::string Fnv64(const RgbImage& im) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : im.pixels) h = (h ^ b) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::vector<std::vector<std::string>> Cases() {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(ReadWholeFile(ImagingDataDir() + "preprocess_cases.txt"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    out.push_back(absl::StrSplit(line, ' '));
  }
  return out;
}

int Int(const std::string& s) {
  int v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(s, &v)) << s;
  return v;
}

// The prepared image against the case's "<w> <h> <fnv64>" at `at`.
void ExpectImage(const absl::StatusOr<RgbImage>& got, const std::vector<std::string>& c, size_t at,
                 const std::string& what) {
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  EXPECT_EQ(got->width, Int(c[at])) << what;
  EXPECT_EQ(got->height, Int(c[at + 1])) << what;
  EXPECT_EQ(Fnv64(*got), c[at + 2]) << what;
}

TEST(ImagePreprocess, MatchesPillowRunningDiffusersSteps) {
  const auto cases = Cases();
  ASSERT_GE(cases.size(), 19u);
  int reference = 0, refused = 0, img2img = 0, kontext = 0;
  for (const auto& c : cases) {
    const std::string what = absl::StrJoin(c, " ");
    const RgbImage src = Source(c[1]);
    if (c[0] == "reference") {
      const int64_t min_side = Int(c[2]), max_aspect = Int(c[3]), max_area = Int(c[4]);
      const int multiple = Int(c[5]);
      const absl::Status check = CheckImageShape(src.width, src.height, min_side, max_aspect);
      if (c[6] == "refuse") {
        EXPECT_EQ(check.code(), absl::StatusCode::kInvalidArgument) << what;
        ++refused;
        continue;
      }
      ASSERT_TRUE(check.ok()) << what << ": " << check;
      ExpectImage(PrepareReferenceImage(src, max_area, multiple), c, 6, what);
      auto size = ReferencePreparedSize(src.width, src.height, max_area, multiple);
      ASSERT_TRUE(size.ok()) << what;
      EXPECT_EQ(size->width, Int(c[6])) << what;
      EXPECT_EQ(size->height, Int(c[7])) << what;
      ++reference;
    } else if (c[0] == "img2img") {
      ExpectImage(PrepareImageToImage(src, Int(c[2]), Int(c[3]), Int(c[4])), c, 5, what);
      ++img2img;
    } else if (c[0] == "kontext") {
      ExpectImage(PrepareKontextImage(src, Int(c[2])), c, 3, what);
      auto size = KontextPreparedSize(src.width, src.height, Int(c[2]));
      ASSERT_TRUE(size.ok()) << what;
      EXPECT_EQ(size->width, Int(c[3])) << what;
      ++kontext;
    } else {
      ADD_FAILURE() << "unknown case " << what;
    }
  }
  EXPECT_EQ(reference, 7);
  EXPECT_EQ(refused, 3);
  EXPECT_EQ(img2img, 4);
  EXPECT_EQ(kontext, 5);
}

TEST(ImagePreprocess, ShapeMessagesNameTheSizeAndTheLimit) {
  absl::Status s = CheckImageShape(63, 200, 64, 8);
  EXPECT_TRUE(absl::StrContains(s.message(), "63x200")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "at least 64")) << s;
  s = CheckImageShape(1000, 100, 64, 8);
  EXPECT_TRUE(absl::StrContains(s.message(), "10.0:1")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "8:1")) << s;
  EXPECT_TRUE(CheckImageShape(8, 64, 8, 8).ok());
  EXPECT_TRUE(CheckImageShape(1, 10000, 0, 0).ok());  // 0: no limit
}

TEST(ImagePreprocess, KontextTiesAndSmallImages) {
  // Exactly square: 1024x1024 (the only difference of 0).
  EXPECT_EQ(*KontextPreparedSize(64, 64, 16), (ImageSize{1024, 1024}));
  // Very wide and very tall: the extremes.
  EXPECT_EQ(*KontextPreparedSize(4096, 16, 16), (ImageSize{1568, 672}));
  EXPECT_EQ(*KontextPreparedSize(16, 4096, 16), (ImageSize{672, 1568}));
  // A multiple of 32 floors the preferred sizes (688 -> 672, 1504 -> 1504).
  EXPECT_EQ(*KontextPreparedSize(688, 1504, 32), (ImageSize{672, 1504}));
  // A side below the multiple: diffusers would divide by zero.
  EXPECT_EQ(KontextPreparedSize(15, 64, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareImageToImage(PatternImage(8, 8), 8, 64, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReferencePreparedSize(10, 100, 0, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ditserve::imaging
