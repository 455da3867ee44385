#include "models/text/llm_rope.h"

namespace ditserve::text {

torch::Tensor LlmInvFreq(int64_t head_dim, double theta, const torch::Device& device) {
  auto opts = torch::TensorOptions().device(device);
  auto exponent = torch::arange(0, head_dim, 2, opts.dtype(torch::kLong)).to(torch::kFloat) /
                  static_cast<double>(head_dim);
  // base ** x with a Python float base: the base is wrapped as a float32 scalar; then 1.0 / that,
  // which PyTorch evaluates as reciprocal().
  return torch::pow(c10::Scalar(theta), exponent).reciprocal();
}

LlmRope LlmRopeTables(const torch::Tensor& position_ids, int64_t head_dim, double theta,
                      const std::vector<int64_t>& mrope_section, torch::ScalarType dtype) {
  const auto inv_freq = LlmInvFreq(head_dim, theta, position_ids.device());
  // (..., T, 1) * (d/2,) -> (..., T, d/2): each angle one float32 product.
  auto angles = position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq;
  auto emb = torch::cat({angles, angles}, -1);
  auto cos = emb.cos();
  auto sin = emb.sin();
  if (!mrope_section.empty()) {
    // (3, B, T, d) -> (B, T, d): chunk i of [s0, s1, s2, s0, s1, s2] from axis i % 3.
    std::vector<int64_t> sections(mrope_section);
    sections.insert(sections.end(), mrope_section.begin(), mrope_section.end());
    auto pick = [&](const torch::Tensor& t) {
      auto chunks = t.split_with_sizes(sections, -1);
      std::vector<torch::Tensor> parts;
      for (size_t i = 0; i < chunks.size(); ++i) parts.push_back(chunks[i][i % 3]);
      return torch::cat(parts, -1);
    };
    cos = pick(cos);
    sin = pick(sin);
  }
  return LlmRope{cos.to(dtype).unsqueeze(1), sin.to(dtype).unsqueeze(1)};
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, x.size(-1) - half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor ApplyLlmRope(const torch::Tensor& x, const LlmRope& rope) {
  return x * rope.cos + RotateHalf(x) * rope.sin;
}

}  // namespace ditserve::text
