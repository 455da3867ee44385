// Test support: seeded random input images that are smooth enough for a VAE to see structure
// (a coarse random grid, bilinearly upsampled), as tensors for in-process pipeline jobs and as PNG
// files for the CLI / client end-to-end tests.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace ditserve::testing {

// A uint8 (height, width, 3) image: a (ceil(height / cell), ceil(width / cell)) grid of
// torch::rand values after torch::manual_seed(seed), upsampled (bilinear), scaled to [0, 255].
torch::Tensor SmoothRandomImage(int64_t height, int64_t width, uint64_t seed, int64_t cell = 4);

// The same image (cell 8) written as an RGB PNG to `path`; returns `path` (a gtest failure when
// it cannot be written).
std::string WriteSmoothPng(const std::string& path, int width, int height, uint64_t seed);

}  // namespace ditserve::testing
