#include "sharding/slicing.h"

namespace ditserve::sharding {

uint64_t RankSlice::numel() const {
  uint64_t n = 1;
  for (int64_t d : local_shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::vector<int64_t> LocalBlocks(const std::vector<int64_t>& blocks, int tp_degree) {
  std::vector<int64_t> out;
  for (int64_t b : blocks) out.push_back(b / tp_degree);
  return out;
}

RankSlice SliceForRank(const PlannedTensor& tensor, int rank, int tp_degree) {
  RankSlice slice;
  slice.local_shape = tensor.shape;
  if (tensor.split_dim < 0) return slice;
  slice.dim = tensor.split_dim;
  int64_t offset = 0;
  int64_t local = 0;
  for (int64_t size : tensor.blocks) {
    const int64_t part = size / tp_degree;
    const int64_t begin = offset + rank * part;
    slice.ranges.emplace_back(begin, begin + part);
    local += part;
    offset += size;
  }
  slice.local_shape[slice.dim] = local;
  return slice;
}

void ForEachByteRun(const std::vector<int64_t>& global_shape, const RankSlice& slice,
                    uint64_t element_size,
                    const std::function<void(uint64_t offset, uint64_t length)>& fn) {
  uint64_t numel = 1;
  for (int64_t d : global_shape) numel *= static_cast<uint64_t>(d);
  // Coalesce runs that happen to touch (n = 1, or the last block of one row meeting the next).
  uint64_t run_begin = 0, run_len = 0;
  auto emit = [&](uint64_t off, uint64_t len) {
    if (len == 0) return;
    if (run_len > 0 && run_begin + run_len == off) {
      run_len += len;
      return;
    }
    if (run_len > 0) fn(run_begin, run_len);
    run_begin = off;
    run_len = len;
  };
  if (slice.dim < 0) {
    emit(0, numel * element_size);
  } else {
    // Elements per index of `dim` (the stride of dim) and the number of outer slabs before it.
    uint64_t inner = 1;
    for (size_t i = slice.dim + 1; i < global_shape.size(); ++i) {
      inner *= static_cast<uint64_t>(global_shape[i]);
    }
    uint64_t outer = 1;
    for (int i = 0; i < slice.dim; ++i) outer *= static_cast<uint64_t>(global_shape[i]);
    const uint64_t dim_size = static_cast<uint64_t>(global_shape[slice.dim]);
    for (uint64_t o = 0; o < outer; ++o) {
      for (const auto& [b, e] : slice.ranges) {
        emit(((o * dim_size + static_cast<uint64_t>(b)) * inner) * element_size,
             static_cast<uint64_t>(e - b) * inner * element_size);
      }
    }
  }
  if (run_len > 0) fn(run_begin, run_len);
}

}  // namespace ditserve::sharding
