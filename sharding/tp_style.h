// Tensor-parallel styles, as diffusers' `_tp_plan` values (diffusers hooks/tensor_parallel.py). Torch-free.
#pragma once

#include "absl/strings/string_view.h"

namespace ditserve::sharding {

enum class TpStyle {
  kReplicated,        // not in the plan: every rank holds the full tensor
  kColwise,           // weight rows and bias sliced; output is this rank's feature shard
  kRowwise,           // weight columns sliced, bias replicated and added once after the all-reduce
  kRowwiseSplitInput, // rowwise on a replicated input: the layer takes its own slice of the input
  kPackedColwise,     // colwise per packed block, local blocks concatenated in block order
  kPackedRowwise,     // rowwise per packed block
};

absl::string_view TpStyleName(TpStyle style);

// True for the styles whose output is a partial sum that needs an all-reduce.
constexpr bool IsRowwise(TpStyle s) {
  return s == TpStyle::kRowwise || s == TpStyle::kRowwiseSplitInput ||
         s == TpStyle::kPackedRowwise;
}
// True for the styles whose layer takes the full (replicated) input and gives every rank the full
// output: what a layer fed by and feeding replicated activations (AdaLN modulation) may be planned.
constexpr bool IsFullInFullOut(TpStyle s) {
  return s == TpStyle::kReplicated || s == TpStyle::kRowwiseSplitInput;
}
constexpr bool IsColwise(TpStyle s) {
  return s == TpStyle::kColwise || s == TpStyle::kPackedColwise;
}

}  // namespace ditserve::sharding
