// The geometry of one Qwen2.5-VL vision forward, computed on the host from the images' patch grids
// (grid_thw): what transformers' vision_utils derives from grid_thw for
// Qwen2_5_VisionTransformerPretrainedModel (get_vision_position_ids, get_vision_window_index,
// get_vision_cu_seqlens), as plain integer lists.
//
// The patch sequence (pixel_values' rows, as the Qwen2-VL image processor lays them out) holds the
// images one after the other; within an image, frame after frame; within a frame, the
// spatial_merge_size² patches of each merged token together (merged tokens in row-major order,
// each one's patches row-major). The tower reorders whole merged tokens into windows of
// merger_window_size² merged tokens (window_index) before the blocks and puts the merged outputs
// back (reverse_index) after the merger.
//
// Thread-safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::text {

// One image's (or video's) patch grid: frames (temporal patches), rows and columns of patches.
struct VisionGrid {
  int64_t t = 0;
  int64_t h = 0;
  int64_t w = 0;
};

// grid_thw: a (num_images, 3) integer tensor on any device (read to the host). INVALID_ARGUMENT
// unless there is at least one row and every t, h, w is in [1, 2^20] with h and w multiples of
// spatial_merge_size (the image processor's resize guarantees it).
absl::StatusOr<std::vector<VisionGrid>> GridsFromTensor(const torch::Tensor& grid_thw,
                                                        int64_t spatial_merge_size);

// Σ t·h·w: the number of pixel_values rows the grids describe.
int64_t TotalPatches(const std::vector<VisionGrid>& grids);

struct VisionLayout {
  int64_t num_patches = 0;
  int64_t num_merged = 0;  // num_patches / spatial_merge_size²: the tower's output rows
  // Output rows of each image, in order (transformers splits get_image_features' result by these).
  std::vector<int64_t> merged_per_image;
  // (num_patches, 2) row-major: the (row, column) of every patch in input order, the rotary
  // embedding's positions (repeated for every frame).
  std::vector<int64_t> position_ids;
  // The window order of the merged tokens: position i of the reordered sequence holds merged token
  // window_index[i] (a permutation of 0..num_merged-1).
  std::vector<int64_t> window_index;
  // argsort(window_index): merged token j sits at position reverse_index[j] of the window order.
  std::vector<int64_t> reverse_index;
  // Attention segments over the window-ordered patch sequence, as cumulative patch counts starting
  // at 0: one segment per frame (full-attention blocks), and one per non-empty window
  // (window-attention blocks; transformers' unique_consecutive drops the empty ones).
  std::vector<int64_t> cu_seqlens;
  std::vector<int64_t> cu_window_seqlens;
};

// INVALID_ARGUMENT for an empty list or a grid GridsFromTensor would refuse, or a
// merger_window_size < 1.
absl::StatusOr<VisionLayout> ComputeVisionLayout(const std::vector<VisionGrid>& grids,
                                                 int64_t spatial_merge_size,
                                                 int64_t merger_window_size);

// x (N, D) taken as N / group blocks of `group` consecutive rows, the blocks reordered: block i of
// the result is block index[i] of x. index: int64 on x's device. With (window_index, unit) this is
// the tower's reordering into windows; with (reverse_index, unit) its inverse.
torch::Tensor PermuteRowGroups(const torch::Tensor& x, const torch::Tensor& index, int64_t group);

}  // namespace ditserve::text
