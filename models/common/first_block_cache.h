// FirstBlockCache: the state of diffusers' First Block Cache (diffusers/hooks/first_block_cache.py,
// FirstBlockCacheConfig(threshold)) for one transformer call context of one job.
//
// A pass runs the first ("head") block of the transformer. Its residual r = head output − head
// input (the image stream's hidden states) is compared with the residual of the last pass this
// context computed in full, r_prev:
//     diff = mean|r − r_prev| / mean|r_prev|      (in r's dtype, as diffusers' tensors compute it)
// and the remaining blocks run when there is no r_prev yet (the context's first pass) or
// diff > threshold (so NaN caches, as in diffusers). A pass that runs them keeps r as r_prev and
// the remaining blocks' residual t = (last block's image-stream output) − (head output); a pass
// that skips them takes head output + t as the last block's output (the text stream's residual is
// never read afterwards by any family's output layers, so it is not kept). r_prev is not updated
// by a cached pass: the comparison is always against the last pass computed in full.
//
// Contexts: diffusers keys the state by the pipeline's cache_context ("cond", "uncond"), so under
// true CFG the prompt's passes and the negative prompt's cache separately; the pipeline keeps one
// FirstBlockCache per context per job (a fresh one per job is diffusers' reset at the end of each
// call). The state holds the batch as one: one decision for every item of the pass, the mean
// taken over all of them, as one diffusers call decides for its whole batch.
//
// Tensor parallelism: rank 0 decides and broadcasts its decision (Decide is a collective), so the
// ranks never part in their all-reduces even if their residuals differed in the last bit.
//
// Threads: the model's forward thread (one pass at a time). Ownership: a plain value, owned by
// the pipeline's job state; the transformer borrows it for one Forward.
#pragma once

#include <cstdint>
#include <limits>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace ditserve::models {

class FirstBlockCache {
 public:
  // `threshold` > 0 (0 is "off": the pipeline then passes no cache at all).
  explicit FirstBlockCache(double threshold) : threshold_(threshold) {}

  double threshold() const { return threshold_; }

  // The value diffusers compares with the threshold for `head_residual` (diff above), without any
  // collective; NaN on the context's first pass (there is no r_prev: the pass computes).
  double Compare(const torch::Tensor& head_residual) const;
  // The context's local decision for `head_residual` (see above), without any collective.
  bool ShouldComputeLocally(const torch::Tensor& head_residual) const;

  // Whether this pass runs the remaining blocks: rank 0's ShouldComputeLocally, broadcast to every
  // rank of `comm` (a collective: every rank calls it at the same point of the same pass).
  // UNAVAILABLE when the group broke. May throw what torch throws (the forward's guard catches).
  // Rank 0 keeps the value it compared (last_compared()).
  absl::StatusOr<bool> Decide(const torch::Tensor& head_residual, comm::Communicator& comm);
  // What the last Decide compared with the threshold: rank 0's Compare; NaN on the other ranks and
  // on the context's first pass. For reports and tests (GenerationResult::CacheDecision).
  double last_compared() const { return last_compared_; }

  // After a pass that ran every block: r_prev = `head_residual`, t = `tail_residual`.
  void Computed(torch::Tensor head_residual, torch::Tensor tail_residual);
  // After a pass that reused t.
  void Cached() { ++cached_passes_; }

  // t, for a cached pass (defined once a pass was computed).
  const torch::Tensor& tail_residual() const { return tail_residual_; }

  uint32_t full_passes() const { return full_passes_; }
  uint32_t cached_passes() const { return cached_passes_; }

 private:
  // The decision for a value Compare returned: no r_prev yet, or the value above the threshold.
  bool ComputesAt(double compared) const;

  double threshold_;
  torch::Tensor head_residual_;  // r_prev
  torch::Tensor tail_residual_;  // t
  uint32_t full_passes_ = 0;
  uint32_t cached_passes_ = 0;
  double last_compared_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace ditserve::models
