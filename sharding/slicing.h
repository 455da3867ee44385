// Slice arithmetic for rank r of n (diffusers hooks/tensor_parallel.py), and the byte runs it takes in a safetensors file
// (diffusers modeling_utils.py's from_pretrained: "read only the rank's slice"). Torch-free, pure functions.
//
// A sliced tensor is split along one dimension (0 for colwise / packed-colwise weights and their
// biases, 1 for rowwise / packed-rowwise weights) into consecutive blocks (one block for the plain
// styles). Rank r keeps [o_k + r*s_k/n, o_k + (r+1)*s_k/n) of every block k, concatenated in block
// order. Divisibility has been checked by ResolveTpPlan.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "sharding/plan_resolver.h"

namespace ditserve::sharding {

struct RankSlice {
  int dim = -1;  // -1: the full tensor
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) along dim, destination order
  std::vector<int64_t> local_shape;
  uint64_t numel() const;
};

RankSlice SliceForRank(const PlannedTensor& tensor, int rank, int tp_degree);

// Local size of every block on one rank (s_k / n); empty for unsliced tensors.
std::vector<int64_t> LocalBlocks(const std::vector<int64_t>& blocks, int tp_degree);

// Calls fn(offset, length) for every maximal contiguous byte run of the slice, relative to the
// start of the tensor's data, in destination order: the runs, read back to back, are the local
// tensor in row-major order. `element_size` is the stored element size.
void ForEachByteRun(const std::vector<int64_t>& global_shape, const RankSlice& slice,
                    uint64_t element_size,
                    const std::function<void(uint64_t offset, uint64_t length)>& fn);

}  // namespace ditserve::sharding
