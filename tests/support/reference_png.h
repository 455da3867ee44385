// Test support: a PNG the server returned, checked against diffusers' image of the fixture call
// (fixtures' flux1.image, float32 in [0, 1]): within one 8-bit level everywhere.
#pragma once

#include <string>

#include <torch/torch.h>

namespace ditserve::testing {

// The PNG decoded to (H, W, 3) uint8; an undefined tensor when it is not a PNG.
torch::Tensor DecodePng(const std::string& bytes);

// gtest expectations: `png_bytes` decodes, has the reference's shape, and is within one level.
void ExpectPngMatchesReference(const std::string& png_bytes);
// The same against another reference image ((H, W, 3) float32 in [0, 1]).
void ExpectPngMatchesImage(const std::string& png_bytes, const torch::Tensor& reference);

}  // namespace ditserve::testing
