// PNG encoding of 8-bit RGB images, with tEXt chunks (the generation parameters, so an image
// carries its own provenance). The image data is filtered (PNG's five row filters, the one libpng's
// heuristic would choose per row) and deflated in strips of at most 128 rows, up to 8 strips, each
// on a thread of its own, as one zlib stream (each strip continues from the one before: its last
// 32 KiB as the dictionary, a sync flush between): about half of libpng's single-thread time on 2
// cores (bench/results/2026-12-06-png-encoder-strips.txt). The strips follow the height only, so
// the bytes do not depend on the machine.
// libpng writes the signature, IHDR, tEXt, the IDAT chunks around that stream and every CRC.
// Torch-free; thread-safe (no shared state); starts up to 7 short-lived threads per call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::worker {

// zlib's settings for the image data. The default is what the server writes: zlib's run-length
// strategy after the adaptive row filters (a third of libpng's default settings' time at the same
// size on a photograph, bench/results/2026-12-05-png-encoder.txt). `level` / `strategy` -1:
// libpng's default settings (level 6, Z_FILTERED); ditserve-png-encode-bench compares them.
struct PngCompression {
  int level = -1;
  int strategy = 3;  // Z_RLE (zlib.h stays out of this header)
};

// `rgb` is height x width x 3 bytes, row-major. Returns the PNG file bytes.
absl::StatusOr<std::string> EncodePng(const uint8_t* rgb, uint32_t height, uint32_t width,
                                      const std::vector<std::pair<std::string, std::string>>& text,
                                      const PngCompression& compression = {});

}  // namespace ditserve::worker
