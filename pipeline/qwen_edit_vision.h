// The image half of Qwen-Image-Edit's prompt encoding (diffusers' QwenImageEditPlusPipeline,
// _get_qwen_prompt_embeds: `self.processor(text=..., images=condition_images)` then the text
// encoder's vision tower): the condition images (JobItem::condition_images, already resized by the
// frontend to about 384 x 384, imaging/qwen_edit_sizes.h) through the Qwen2-VL image processor
// (imaging/qwen2vl_image_processor.h, settings from the folder's processor/, see
// qwen2vl_processor_config.h) and Qwen2.5-VL's vision tower (models/text/qwen2_5_vl_vision.h) into
// the image embeddings the language model's <|image_pad|> tokens take.
//
// Placement: the tower runs on one rank (the rank that encodes prompts alone, or rank 0 when the
// language model is sharded, which then broadcasts the embeddings; qwenimage_pipeline.cc). Every
// rank that tokenizes needs the images' grids, a pure function of their sizes (Grids).
//
// Ownership: owns the tower. Threads: one Encode at a time on the rank's engine thread; Grids is
// const and pure.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "imaging/qwen2vl_image_processor.h"
#include "models/text/qwen2_5_vl_vision.h"
#include "pipeline/pipeline.h"

namespace ditserve::pipeline {

class QwenEditVision {
 public:
  // The processor's settings from `processor_dir`, checked against the tower's config in
  // "<text_encoder_dir>/config.json" (patch, temporal patch and merge sizes must agree, the tower's
  // out_hidden_size must be `text_hidden_size`); with `with_tower`, the tower's weights too
  // (options' device and dtype). Errors name the file and the field or tensor.
  static absl::StatusOr<QwenEditVision> Load(const std::string& processor_dir,
                                             const std::string& text_encoder_dir,
                                             int64_t text_hidden_size,
                                             const PipelineOptions& options, bool with_tower);

  // image_grid_thw of the processor for these condition images (uint8 (H, W, 3) CPU tensors), in
  // order. INVALID_ARGUMENT "condition_images[i]: ..." for a bad tensor or an image the processor
  // refuses (an aspect ratio above 200).
  absl::StatusOr<std::vector<std::array<int64_t, 3>>> Grids(
      const std::vector<torch::Tensor>& condition_images) const;
  // <|image_pad|> tokens (merged vision tokens) over all the grids.
  int64_t ImageTokens(const std::vector<std::array<int64_t, 3>>& grids) const;

  // Only where loaded with_tower: the processor's pixel_values through the tower, (ImageTokens,
  // out_hidden_size) in the tower's dtype on its device, the images one after the other.
  absl::StatusOr<torch::Tensor> Encode(const std::vector<torch::Tensor>& condition_images) const;

  const imaging::Qwen2VlImageConfig& image_config() const { return image_config_; }
  bool has_tower() const { return tower_.has_value(); }
  uint64_t weight_bytes() const { return tower_ ? tower_->weight_bytes() : 0; }

 private:
  QwenEditVision() = default;

  imaging::Qwen2VlImageConfig image_config_;
  std::optional<text::Qwen25VlVision> tower_;
};

}  // namespace ditserve::pipeline
