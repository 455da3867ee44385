// Turns one decoded image into the bytes a client asked for: PNG (8-bit, rounded as diffusers'
// numpy_to_pil does: round(x * 255)) with the generation parameters as tEXt chunks, or raw
// float32 H x W x 3 little-endian.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::worker {

// `image` is (H, W, 3) floating in [0, 1] on any device. Runs on RPC handler threads: torch errors
// (the copy to the host, no memory) come back as Status (GuardTorch).
absl::StatusOr<std::string> EncodeImage(const torch::Tensor& image, ditserve::v1::OutputFormat format,
                                        const std::vector<std::pair<std::string, std::string>>& text);

}  // namespace ditserve::worker
