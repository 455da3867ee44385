// What the imaging tests share with their Python case generators (tests/unit/data/
// make_preprocess_cases.py, make_qwen2vl_cases.py): where the data lives, reading a file whole,
// and pattern(w, h), the formula image both scripts build. Header-only; the test target defines
// DITSERVE_SOURCE_DIR.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "imaging/image.h"

namespace ditserve::testing {

inline std::string ImagingDataDir() {
  return std::string(DITSERVE_SOURCE_DIR) + "/tests/unit/data/";
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The scripts' pattern(w, h): R = 7x + 3y, G = x * y, B = (x >> 2) ^ (y >> 2), each mod 256.
inline imaging::RgbImage PatternImage(int w, int h) {
  imaging::RgbImage im = imaging::MakeRgbImage(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &im.pixels[im.Offset(x, y)];
      p[0] = static_cast<uint8_t>((7 * x + 3 * y) & 255);
      p[1] = static_cast<uint8_t>((static_cast<int64_t>(x) * y) & 255);
      p[2] = static_cast<uint8_t>(((x >> 2) ^ (y >> 2)) & 255);
    }
  }
  return im;
}

}  // namespace ditserve::testing
