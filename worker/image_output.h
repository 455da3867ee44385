// Turns one decoded image into the bytes a client asked for: PNG (8-bit, rounded as diffusers'
// numpy_to_pil does: round(x * 255)) with the generation parameters as tEXt chunks, JPEG (the same
// 8-bit pixels, the parameters as a COM marker) or lossy WebP at `quality` (0..100), or raw
// float32 H x W x 3 little-endian. The one place a result's image bytes are made.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::worker {

// `image` is (H, W, 3) floating in [0, 1] on any device. Runs on RPC handler threads: torch errors
// (the copy to the host, no memory) come back as Status (GuardTorch).
// `quality` is used by JPEG and WebP only.
absl::StatusOr<std::string> EncodeImage(const torch::Tensor& image, ditserve::v1::OutputFormat format,
                                        const std::vector<std::pair<std::string, std::string>>& text,
                                        uint32_t quality = 100);

}  // namespace ditserve::worker
