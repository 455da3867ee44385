#include "models/text/t5_relative_position.h"

#include <cmath>

namespace ditserve::text {

torch::Tensor T5BidirectionalBuckets(int64_t query_len, int64_t key_len, int64_t num_buckets,
                                     int64_t max_distance, torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto context = torch::arange(query_len, opts).unsqueeze(1);
  auto memory = torch::arange(key_len, opts).unsqueeze(0);
  auto rel = memory - context;  // (q, k)

  const int64_t half = num_buckets / 2;
  auto buckets = rel.gt(0).to(torch::kLong) * half;
  rel = rel.abs();
  const int64_t max_exact = half / 2;
  auto is_small = rel.lt(max_exact);
  // float32 arithmetic with the scalars as Python would pass them, so the truncation to an integer
  // bucket happens at exactly the same boundaries as in transformers. Distance 0 gives -inf here
  // but is always taken from the exact branch.
  auto large = torch::log(rel.to(torch::kFloat) / static_cast<double>(max_exact)) /
               std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
               static_cast<double>(half - max_exact);
  auto if_large = (large.to(torch::kLong) + max_exact).clamp_max(half - 1);
  return buckets + torch::where(is_small, rel, if_large);
}

}  // namespace ditserve::text
