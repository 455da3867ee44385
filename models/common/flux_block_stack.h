// The block order FLUX.1 and FLUX.2 share (diffusers' transformer_blocks, then
// single_transformer_blocks): blocks are numbered 0 .. D + S − 1, the D double blocks first. A
// double block updates the image stream `h` and the text stream `context` separately; a run of
// single blocks works on [context, h] joined along the tokens and splits it back after the run
// (diffusers' single blocks join and split inside each block: the same values).
//
// A pass runs [0, 1) (the head block, First Block Cache's) and then [1, D + S), or [0, D + S).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>

#include <torch/torch.h>

namespace ditserve::models {

// Runs blocks [begin, end) over (h, context): run_double(i, h, context) -> (h, context) for
// double block i, run_single(j, x) -> x for single block j (= i − num_double).
template <typename DoubleFn, typename SingleFn>
void RunFluxBlocks(size_t begin, size_t end, size_t num_double, torch::Tensor& h,
                   torch::Tensor& context, const DoubleFn& run_double, const SingleFn& run_single) {
  size_t i = begin;
  for (; i < end && i < num_double; ++i) std::tie(h, context) = run_double(i, h, context);
  if (i >= end) return;
  const int64_t text_len = context.size(1);
  torch::Tensor x = torch::cat({context, h}, 1);
  for (; i < end; ++i) x = run_single(i - num_double, x);
  context = x.narrow(1, 0, text_len);
  h = x.narrow(1, text_len, x.size(1) - text_len);
}

}  // namespace ditserve::models
