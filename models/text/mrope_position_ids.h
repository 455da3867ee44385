// Qwen2-VL / Qwen2.5-VL's 3-D M-RoPE position ids of a prompt with images, as transformers 5.17
// computes them (Qwen2VLModel.get_rope_index with get_vision_position_ids; Qwen2.5-VL's image case
// is the same computation, `second_per_grid_ts` only scales videos):
//
//   mm_token_type_ids = (input_ids == image_token_id)   (the processor's: 1 image, 0 text)
//   per row b: keep the positions where attention_mask[b] == 1 (all without a mask), group the kept
//   tokens into runs of equal type (itertools.groupby), current_pos = 0, then per run:
//     text of length n:  positions current_pos + [0, n) on all 3 axes; current_pos += n
//     image run: the next grid (t, h, w) of `image_grids` (one iterator across the whole batch),
//       (lt, lh, lw) = (t, h / merge, w / merge); for (i, j, k) over that grid in row-major order:
//       (i + current_pos, j + current_pos, k + current_pos); current_pos += max(h, w) / merge
//   the positions are written to the kept columns; masked columns stay 0.
//
// So a run of image tokens is ONE image: the processor always separates two images by
// <|vision_end|><|vision_start|> (text). A run whose length is not t*h*w/merge² of its grid, a run
// with no grid left, and grids left over at the end are refused (transformers fails on the first
// two with a shape / StopIteration error; it ignores leftover grids here but its forward then
// refuses the image-feature count).
//
// Thread-safety: pure function (reads the inputs on the host).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::text {

// One image's patch grid as the image processor returns it (image_grid_thw): temporal, height and
// width in patches, before the spatial merge.
struct ImageGridThw {
  int64_t t = 1;
  int64_t h = 0;
  int64_t w = 0;
};

// input_ids: (B, T) integer, the image tokens already expanded (t*h*w/merge² per image);
// attention_mask: (B, T) 0/1 (integer or bool) or undefined. Returns (3, B, T) int64 on
// input_ids' device.
absl::StatusOr<torch::Tensor> MropePositionIds(const torch::Tensor& input_ids,
                                               const torch::Tensor& attention_mask,
                                               int64_t image_token_id,
                                               const std::vector<ImageGridThw>& image_grids,
                                               int64_t spatial_merge_size);

}  // namespace ditserve::text
