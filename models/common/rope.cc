#include "models/common/rope.h"

#include "models/common/complex_rope.h"

namespace ditserve::models {

RopeTables FluxRopeTables(const torch::Tensor& ids, const std::vector<int64_t>& axes_dims,
                          double theta) {
  TORCH_CHECK(ids.dim() == 2, "rope ids must be (S, axes), got ", ids.sizes());
  TORCH_CHECK(ids.size(1) >= static_cast<int64_t>(axes_dims.size()), "rope ids have ", ids.size(1),
              " axes, the config ", axes_dims.size());
  // MPS has no float64; everything we run on (CPU, CUDA) does.
  const auto fdtype = ids.device().is_mps() ? torch::kFloat32 : torch::kFloat64;
  auto pos = ids.to(torch::kFloat32);
  std::vector<torch::Tensor> cos_parts, sin_parts;
  for (size_t a = 0; a < axes_dims.size(); ++a) {
    const int64_t d = axes_dims[a];
    auto opts = torch::TensorOptions().dtype(fdtype).device(ids.device());
    auto j = torch::arange(0, d, 2, opts).slice(0, 0, d / 2);
    auto omega = 1.0 / torch::pow(theta, j / static_cast<double>(d));
    auto angles = torch::outer(pos.select(1, static_cast<int64_t>(a)).to(fdtype), omega);
    // Each entry twice in place ([c0, c0, c1, c1, ...]): stack + flatten, copies only, and no
    // host synchronisation (a CUDA graph captures this).
    auto pairs = [](const torch::Tensor& t) { return torch::stack({t, t}, -1).flatten(-2); };
    cos_parts.push_back(pairs(angles.cos()).to(torch::kFloat32));
    sin_parts.push_back(pairs(angles.sin()).to(torch::kFloat32));
  }
  return MakeRopeTables(torch::cat(cos_parts, -1), torch::cat(sin_parts, -1));
}

RopeTables MakeRopeTables(torch::Tensor cos, torch::Tensor sin) {
  // Every pair repeats its angle: take one of each.
  auto c = cos.slice(-1, 0, cos.size(-1), 2).to(torch::kFloat32);
  auto s = sin.slice(-1, 0, sin.size(-1), 2).to(torch::kFloat32);
  auto freqs = torch::view_as_complex(torch::stack({c, s}, -1).contiguous());
  return RopeTables{std::move(cos), std::move(sin), std::move(freqs)};
}

torch::Tensor ApplyRotaryEmbInterleaved(const torch::Tensor& x, const RopeTables& rope) {
  if (rope.freqs.defined()) return ApplyRotaryEmbComplex(x, rope.freqs.to(x.device()));
  // Tables without freqs: the reference's op sequence. (S, hd) → (1, S, 1, hd).
  auto cos = rope.cos.unsqueeze(0).unsqueeze(2).to(x.device());
  auto sin = rope.sin.unsqueeze(0).unsqueeze(2).to(x.device());
  std::vector<int64_t> pair_shape(x.sizes().begin(), x.sizes().end() - 1);
  pair_shape.push_back(-1);
  pair_shape.push_back(2);
  auto pairs = x.reshape(pair_shape).unbind(-1);
  auto rotated = torch::stack({-pairs[1], pairs[0]}, -1).flatten(3);
  return (x.to(torch::kFloat32) * cos + rotated.to(torch::kFloat32) * sin).to(x.scalar_type());
}

}  // namespace ditserve::models
