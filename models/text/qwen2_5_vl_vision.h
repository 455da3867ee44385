// The vision tower of Qwen2_5_VLForConditionalGeneration (transformers 5.17.0's
// Qwen2_5_VisionTransformerPretrainedModel): images as the Qwen2-VL image processor prepares them
// (pixel_values + image_grid_thw) to the embeddings Qwen2_5_VLModel.get_image_features returns
// (its pooler_output, all images concatenated), for Qwen-Image-Edit's prompt encoding.
//
//   patch embed (Conv3d, kernel = stride = (temporal_patch_size, patch_size, patch_size), no bias;
//     computed as one matmul over the flattened kernel) -> reorder merged tokens into windows
//     (qwen2_5_vl_vision_layout.h) -> `depth` blocks: x += proj(attn(RMSNorm1(x))),
//     x += down(act(gate(h)) * up(h)) with h = RMSNorm2(x); fused qkv with bias, the 2-D rotary
//     embedding (theta rope_theta, dim head_dim / 2) in float32, attention within a frame on
//     fullatt_block_indexes and within a window elsewhere (qwen2_5_vl_vision_attention.h); never
//     across images -> merger: RMSNorm ln_q over hidden_size, view (-1, hidden_size *
//     spatial_merge_size²), Linear, exact GELU, Linear to out_hidden_size -> merged tokens put
//     back in input order.
// RMSNorms are Qwen2RMSNorm (eps 1e-6: float32 statistics, cast back, times the weight).
//
// Weights: the tower's tensors of the text encoder's checkpoint (the file the language model is
// loaded from), under "visual." (Qwen-Image's layout) or "model.visual." (transformers 5's save
// layout), e.g. visual.blocks.0.attn.qkv.weight, visual.merger.mlp.0.weight,
// visual.patch_embed.proj.weight. Load reads only those, through the production loader.
//
// Tensor parallelism: none. The tower is small next to the language model (~670 M parameters for
// Qwen2.5-VL-7B's) and runs replicated on the rank that encodes prompts (rank 0); Load is local
// (no collective) and Forward is not a collective.
//
// Ownership: owns (refcounted) its tensors. Works in the dtype (float32 / bfloat16 / float16) and
// on the device its weights were loaded to (CPU or CUDA; plain torch ops). Thread-safety:
// immutable after Load / Create; Forward is const and may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/text/qwen2_5_vl_vision_config.h"
#include "models/text/qwen2_5_vl_vision_layout.h"
#include "sharding/loader.h"
#include "sharding/state_dict.h"

namespace ditserve::text {

class VisionSegments;  // qwen2_5_vl_vision_attention.h

class Qwen25VlVision {
 public:
  // Reads "<text_encoder_dir>/config.json"'s vision_config and the tower's tensors of the
  // component's checkpoint. `opts`: device, dtype, staging buffer and progress as given;
  // `select` is replaced by the tower's prefix. Errors name the folder and the first bad field or
  // missing / mis-shaped tensor.
  static absl::StatusOr<Qwen25VlVision> Load(const std::string& text_encoder_dir,
                                             sharding::LoadOptions opts = {});
  // From a replicated state dict holding the tower's tensors under "visual." or "model.visual."
  // (other tensors are ignored). Errors name the first missing or mis-shaped tensor.
  static absl::StatusOr<Qwen25VlVision> Create(const Qwen25VlVisionConfig& config,
                                               const sharding::ShardedStateDict& state);

  // pixel_values: (num_patches, patch_dim) floating, any device (converted to the model's dtype
  // and device); grid_thw: (num_images, 3) integers (t, h, w in patches; see GridsFromTensor),
  // Σ t·h·w = num_patches. Returns (Σ t·h·w / spatial_merge_size², out_hidden_size) in the model
  // dtype on the model device: the images' tokens one image after the other (LayoutOf(grids)
  // .merged_per_image splits them). INVALID_ARGUMENT for inputs of the wrong shape or type.
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& pixel_values,
                                        const torch::Tensor& grid_thw) const;

  // The host-side geometry Forward uses for these grids.
  absl::StatusOr<VisionLayout> LayoutOf(const std::vector<VisionGrid>& grids) const;

  const Qwen25VlVisionConfig& config() const { return config_; }
  // The tensor-name prefix the tower was loaded from ("visual." / "model.visual.").
  const std::string& prefix() const { return prefix_; }
  // Bytes of the tower's tensors.
  uint64_t weight_bytes() const { return weight_bytes_; }
  torch::ScalarType dtype() const { return patch_w_.scalar_type(); }
  torch::Device device() const { return patch_w_.device(); }

 private:
  struct Block {
    torch::Tensor norm1, norm2;
    torch::Tensor qkv_w, qkv_b, proj_w, proj_b;
    torch::Tensor gate_w, gate_b, up_w, up_b, down_w, down_b;
  };

  Qwen25VlVision() = default;
  torch::Tensor ForwardUnguarded(const torch::Tensor& pixel_values,
                                 const VisionLayout& layout) const;
  torch::Tensor BlockForward(const Block& b, const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, const VisionSegments& segments) const;

  Qwen25VlVisionConfig config_;
  std::string prefix_;
  uint64_t weight_bytes_ = 0;
  torch::Tensor patch_w_;   // (hidden_size, patch_dim): the Conv3d kernel flattened
  torch::Tensor inv_freq_;  // (head_dim / 4,) float32 on the model device
  std::vector<Block> blocks_;
  torch::Tensor ln_q_, merger_w0_, merger_b0_, merger_w2_, merger_b2_;
};

}  // namespace ditserve::text
