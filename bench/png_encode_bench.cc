// The PNG encoder's speed and size against libpng's defaults, on an image file or on noise (what
// random weights decode to). Each line: best of --runs encodes, the PNG's bytes.
//
//   build/bench/ditserve-png-encode-bench [--image FILE | --noise WxH] [--runs N]
//
// All three through worker/png_encoder.h's EncodePng: "shipped" with its default PngCompression
// (adaptive filters, zlib's run-length strategy); "libpng default" with libpng's default settings
// (adaptive filters, zlib level 6, Z_FILTERED); "level 1": zlib's fastest string matching. Results:
// bench/results/2026-12-05-png-encoder.txt (libpng's own single-thread writer),
// 2026-12-06-png-encoder-strips.txt (the strips on threads).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>

#include "imaging/decode.h"
#include "worker/png_encoder.h"

namespace {

void Time(const char* name, int runs, const std::function<std::string()>& encode) {
  double best = 1e30;
  size_t bytes = 0;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    bytes = encode().size();
    best = std::min(
        best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count());
  }
  std::printf("%-16s %8.1f ms %10zu bytes\n", name, best, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  std::string image_path;
  int width = 1024, height = 1024, runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--image") {
      image_path = argv[i + 1];
    } else if (flag == "--noise") {
      if (std::sscanf(argv[i + 1], "%dx%d", &width, &height) != 2) return 2;
    } else if (flag == "--runs") {
      runs = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--image FILE | --noise WxH] [--runs N]\n", argv[0]);
      return 2;
    }
  }
  ditserve::imaging::RgbImage img;
  if (!image_path.empty()) {
    std::ifstream in(image_path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto decoded = ditserve::imaging::DecodeImage(bytes);
    if (!decoded.ok()) {
      std::fprintf(stderr, "%s: %s\n", image_path.c_str(), decoded.status().ToString().c_str());
      return 1;
    }
    img = std::move(decoded->image);
  } else {
    img = ditserve::imaging::MakeRgbImage(width, height);
    std::mt19937 rng(0);
    for (uint8_t& b : img.pixels) b = static_cast<uint8_t>(rng());
  }
  std::printf("%dx%d %s, best of %d\n", img.width, img.height,
              image_path.empty() ? "noise" : image_path.c_str(), runs);
  const auto encode = [&](const ditserve::worker::PngCompression& compression) {
    return [&img, compression] {
      auto png = ditserve::worker::EncodePng(img.pixels.data(), static_cast<uint32_t>(img.height),
                                             static_cast<uint32_t>(img.width), {}, compression);
      return png.ok() ? *png : std::string();
    };
  };
  Time("shipped", runs, encode({}));
  Time("libpng default", runs, encode({/*level=*/-1, /*strategy=*/-1}));
  Time("level 1", runs, encode({/*level=*/1, /*strategy=*/-1}));
  return 0;
}
