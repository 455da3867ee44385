// T5's bidirectional relative-position buckets (the encoder's attention bias index).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace ditserve::text {

// (query_len, key_len) int64 bucket of relative position key - query: half the buckets for keys
// after the query; within each half, exact buckets for small distances and logarithmically wider
// ones up to max_distance, beyond which everything shares the last bucket. num_buckets >= 4.
torch::Tensor T5BidirectionalBuckets(int64_t query_len, int64_t key_len, int64_t num_buckets,
                                     int64_t max_distance, torch::Device device);

}  // namespace ditserve::text
