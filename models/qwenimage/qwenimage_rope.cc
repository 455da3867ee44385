#include "models/qwenimage/qwenimage_rope.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/common/complex_rope.h"
#include "models/common/model_checks.h"

namespace ditserve::models::qwenimage {
namespace {
constexpr int64_t kTableSize = 4096;  // QwenEmbedRope's pos_freqs / neg_freqs rows
}  // namespace

absl::StatusOr<std::vector<ImageShape>> ImageShapesFromTensor(const torch::Tensor& img_shapes,
                                                              int64_t batch, int64_t image_tokens) {
  std::vector<ImageShape> shapes;
  if (!img_shapes.defined()) {
    const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(image_tokens))));
    if (side * side != image_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Qwen-Image forward: no img_shapes given and ", image_tokens,
          " image tokens are not a square grid; pass img_shapes (frames, h', w')"));
    }
    shapes.push_back(ImageShape{1, side, side});
    return shapes;
  }
  auto s = img_shapes.to(torch::kCPU).to(torch::kFloat64);
  if (s.dim() == 1) s = s.reshape({1, 1, -1});
  if (s.dim() == 2) s = s.unsqueeze(1);
  if (s.dim() != 3 || s.size(2) != 3 || s.size(1) < 1 ||
      (s.size(0) != batch && !(s.size(0) == 1 && img_shapes.dim() == 1))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Qwen-Image forward: img_shapes must be (3,), (", batch, ", 3) or (", batch,
        ", K, 3) of (frames, h', w'), got ", ShapeString(img_shapes)));
  }
  if (!torch::equal(s.round(), s) || (s < 1).any().item<bool>()) {
    return absl::InvalidArgumentError("Qwen-Image forward: img_shapes must hold positive integers");
  }
  for (int64_t b = 1; b < s.size(0); ++b) {
    if (!torch::equal(s[b], s[0])) {
      return absl::InvalidArgumentError(
          "Qwen-Image forward: img_shapes differ across the batch (one RoPE table serves all samples)");
    }
  }
  auto first = s[0].to(torch::kInt64).contiguous();
  int64_t total = 0;
  for (int64_t k = 0; k < first.size(0); ++k) {
    ImageShape shape{first[k][0].item<int64_t>(), first[k][1].item<int64_t>(),
                     first[k][2].item<int64_t>()};
    total += shape.frames * shape.height * shape.width;
    shapes.push_back(shape);
  }
  if (total != image_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("Qwen-Image forward: img_shapes describe ", total,
                                                   " tokens, hidden_states has ", image_tokens));
  }
  return shapes;
}

absl::StatusOr<QwenRopeFreqs> QwenRopeFrequencies(const std::vector<ImageShape>& shapes,
                                                  int64_t text_len,
                                                  const std::vector<int64_t>& axes_dims,
                                                  double theta, const torch::Device& device) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<torch::Tensor> image_positions;
  int64_t max_index = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto& s = shapes[k];
    // Centred rows/columns: the last ceil(h/2) negative positions, then 0 .. floor(h/2) - 1.
    auto f = torch::arange(s.frames, i64) + static_cast<int64_t>(k);
    auto y = torch::arange(s.height, i64) - (s.height - s.height / 2);
    auto x = torch::arange(s.width, i64) - (s.width - s.width / 2);
    auto grid = torch::meshgrid({f, y, x}, "ij");
    image_positions.push_back(
        torch::stack({grid[0].reshape(-1), grid[1].reshape(-1), grid[2].reshape(-1)}, 1));
    max_index = std::max({max_index, s.height / 2, s.width / 2});
    if (static_cast<int64_t>(k) + s.frames > kTableSize || s.height > 2 * kTableSize ||
        s.width > 2 * kTableSize) {
      return absl::InvalidArgumentError("Qwen-Image forward: image grid beyond the RoPE tables");
    }
  }
  if (max_index + text_len > kTableSize) {
    return absl::InvalidArgumentError(absl::StrCat("Qwen-Image forward: text positions up to ",
                                                   max_index + text_len,
                                                   " exceed the RoPE table size ", kTableSize));
  }
  auto text_positions = (torch::arange(text_len, i64) + max_index).unsqueeze(1).expand({text_len, 3});
  QwenRopeFreqs out;
  out.image = ComplexRopeFrequencies(torch::cat(image_positions, 0), axes_dims, theta, device);
  out.text = ComplexRopeFrequencies(text_positions, axes_dims, theta, device);
  // Built once per forward, shared by every block. Copies only: the joint table's entries are the
  // per-stream ones bit for bit.
  auto freqs = torch::cat({out.text, out.image}, 0);
  // Each entry twice in place ([c0, c0, c1, c1, ...]; stack + flatten: no host sync on CUDA, as
  // repeat_interleave would have to size its output).
  auto pairs = [](const torch::Tensor& t) { return torch::stack({t, t}, -1).flatten(-2); };
  out.joint = RopeTables{pairs(torch::real(freqs)), pairs(torch::imag(freqs)), freqs};
  return out;
}

}  // namespace ditserve::models::qwenimage
