#include "models/text/qwen2_5_vl_vision_attention.h"

#include <map>

#include "common/torch_compat.h"

namespace ditserve::text {

torch::Tensor ApplyVisionRope(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin) {
  const auto xf = x.to(torch::kFloat32);
  const int64_t half = x.size(-1) / 2;
  // rotate_half: cat(-x2, x1).
  const auto rotated = torch::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)).to(x.scalar_type());
}

VisionSegments VisionSegments::Build(const std::vector<int64_t>& cu, const torch::Device& device) {
  std::map<int64_t, std::vector<int64_t>> starts_by_length;
  for (size_t i = 1; i < cu.size(); ++i) {
    const int64_t length = cu[i] - cu[i - 1];
    if (length > 0) starts_by_length[length].push_back(cu[i - 1]);
  }
  VisionSegments s;
  for (const auto& [length, starts] : starts_by_length) {
    Group g;
    g.length = length;
    g.count = static_cast<int64_t>(starts.size());
    if (starts_by_length.size() > 1) {
      std::vector<int64_t> rows;
      rows.reserve(static_cast<size_t>(g.count * length));
      for (int64_t start : starts) {
        for (int64_t r = 0; r < length; ++r) rows.push_back(start + r);
      }
      g.rows = torch::tensor(rows, torch::kLong).to(device);
    }
    s.groups_.push_back(std::move(g));
  }
  return s;
}

int64_t VisionSegments::num_segments() const {
  int64_t n = 0;
  for (const Group& g : groups_) n += g.count;
  return n;
}

torch::Tensor VisionSegments::Attend(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v) const {
  const int64_t n = q.size(0), heads = q.size(1), hd = q.size(2);
  // (rows of `count` segments of `length`) -> (count, heads, length, head_dim).
  auto batch = [&](const torch::Tensor& t, int64_t count, int64_t length) {
    return t.reshape({count, length, heads, hd}).transpose(1, 2);
  };
  if (groups_.size() == 1 && !groups_[0].rows.defined()) {
    const Group& g = groups_[0];
    auto o = compat::ScaledDotProductAttention(
        batch(q, g.count, g.length), batch(k, g.count, g.length), batch(v, g.count, g.length));
    return o.transpose(1, 2).reshape({n, heads * hd});
  }
  auto out = torch::empty({n, heads * hd}, q.options());
  for (const Group& g : groups_) {
    auto gather = [&](const torch::Tensor& t) {
      return batch(t.index_select(0, g.rows), g.count, g.length);
    };
    auto o = compat::ScaledDotProductAttention(gather(q), gather(k), gather(v));
    out.index_copy_(0, g.rows, o.transpose(1, 2).reshape({g.count * g.length, heads * hd}));
  }
  return out;
}

}  // namespace ditserve::text
