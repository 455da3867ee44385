// Test helper: slices a full (replicated) state dict for one rank by a TP plan, following the
// slicing of diffusers' hooks/tensor_parallel.py literally (contiguous row/column ranges, per-block
// for packed styles, colwise bias sliced, rowwise bias replicated). Used to exercise the TP layers
// and models independently of the production loader (sharding/loader.h).
#pragma once

#include <string>
#include <vector>

#include "sharding/state_dict.h"
#include "sharding/tp_style.h"

namespace ditserve::testing {

struct TestPlanEntry {
  std::string pattern;  // module path; '*' matches one path component
  sharding::TpStyle style;
  std::vector<int64_t> blocks;  // packed styles: block proportions
};

// FLUX.1's _tp_plan (transformer_flux.py); proj_out blocks [D, 4D].
std::vector<TestPlanEntry> Flux1TestPlan(int64_t inner_dim);

// This rank's slice of `full` (world_size 1 gives the full tensors with the plan's styles).
sharding::ShardedStateDict SliceForRank(const sharding::ShardedStateDict& full,
                                        const std::vector<TestPlanEntry>& plan, int rank,
                                        int world_size);

}  // namespace ditserve::testing
