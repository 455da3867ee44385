#include "pipeline/qwen_edit_vision.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "pipeline/component_loading.h"
#include "pipeline/qwen2vl_processor_config.h"

namespace ditserve::pipeline {
namespace {

absl::Status Mismatch(const std::string& what, int64_t processor, int64_t tower,
                      const std::string& processor_dir, const std::string& text_encoder_dir) {
  return absl::FailedPreconditionError(absl::StrCat(processor_dir, ": the image processor's ", what,
                                                    " is ", processor, " but ", text_encoder_dir,
                                                    "/config.json's vision_config has ", tower));
}

// A condition image tensor as the imaging library's image (a copy of the bytes).
absl::StatusOr<imaging::RgbImage> ToRgbImage(const torch::Tensor& t, size_t i) {
  if (!t.defined() || t.dim() != 3 || t.size(2) != 3 || t.scalar_type() != torch::kUInt8 ||
      t.size(0) < 1 || t.size(1) < 1 || !t.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("condition_images[", i, "] must be a uint8 (H, W, 3) CPU tensor"));
  }
  const torch::Tensor c = t.contiguous();
  imaging::RgbImage image =
      imaging::MakeRgbImage(static_cast<int>(c.size(1)), static_cast<int>(c.size(0)));
  std::memcpy(image.pixels.data(), c.data_ptr<uint8_t>(), image.pixels.size());
  return image;
}

}  // namespace

absl::StatusOr<QwenEditVision> QwenEditVision::Load(const std::string& processor_dir,
                                                    const std::string& text_encoder_dir,
                                                    int64_t text_hidden_size,
                                                    const PipelineOptions& options,
                                                    bool with_tower) {
  QwenEditVision v;
  ASSIGN_OR_RETURN(v.image_config_, LoadQwen2VlImageConfig(processor_dir));
  ASSIGN_OR_RETURN(text::Qwen25VlVisionConfig tower,
                   text::LoadQwen25VlVisionConfig(text_encoder_dir + "/config.json"));
  const imaging::Qwen2VlImageConfig& p = v.image_config_;
  if (p.patch_size != tower.patch_size) {
    return Mismatch("patch_size", p.patch_size, tower.patch_size, processor_dir, text_encoder_dir);
  }
  if (p.temporal_patch_size != tower.temporal_patch_size) {
    return Mismatch("temporal_patch_size", p.temporal_patch_size, tower.temporal_patch_size,
                    processor_dir, text_encoder_dir);
  }
  if (p.merge_size != tower.spatial_merge_size) {
    return Mismatch("merge_size", p.merge_size, tower.spatial_merge_size, processor_dir,
                    text_encoder_dir);
  }
  if (tower.out_hidden_size != text_hidden_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        text_encoder_dir, "/config.json: vision_config.out_hidden_size is ", tower.out_hidden_size,
        " but the language model's hidden_size is ", text_hidden_size));
  }
  if (with_tower) {
    sharding::LoadOptions lo = ShardLoadOptions(options);
    lo.progress = nullptr;
    ASSIGN_OR_RETURN(text::Qwen25VlVision loaded, text::Qwen25VlVision::Load(text_encoder_dir, lo));
    v.tower_.emplace(std::move(loaded));
  }
  return v;
}

absl::StatusOr<std::vector<std::array<int64_t, 3>>> QwenEditVision::Grids(
    const std::vector<torch::Tensor>& condition_images) const {
  std::vector<std::array<int64_t, 3>> grids;
  for (size_t i = 0; i < condition_images.size(); ++i) {
    const torch::Tensor& t = condition_images[i];
    if (!t.defined() || t.dim() != 3 || t.size(0) < 1 || t.size(1) < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("condition_images[", i, "] must be a (H, W, 3) image"));
    }
    absl::StatusOr<std::array<int64_t, 3>> grid = imaging::Qwen2VlGridThw(
        static_cast<int>(t.size(1)), static_cast<int>(t.size(0)), image_config_);
    if (!grid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("condition_images[", i, "]: ", grid.status().message()));
    }
    grids.push_back(*grid);
  }
  return grids;
}

int64_t QwenEditVision::ImageTokens(const std::vector<std::array<int64_t, 3>>& grids) const {
  int64_t n = 0;
  for (const auto& g : grids) n += imaging::Qwen2VlImageTokenCount(g, image_config_.merge_size);
  return n;
}

absl::StatusOr<torch::Tensor> QwenEditVision::Encode(
    const std::vector<torch::Tensor>& condition_images) const {
  if (!tower_) return absl::InternalError("QwenEditVision::Encode on a rank without the tower");
  std::vector<imaging::RgbImage> images;
  for (size_t i = 0; i < condition_images.size(); ++i) {
    ASSIGN_OR_RETURN(imaging::RgbImage image, ToRgbImage(condition_images[i], i));
    images.push_back(std::move(image));
  }
  absl::StatusOr<imaging::Qwen2VlPixelValues> px =
      imaging::Qwen2VlPreprocess(images, image_config_);
  if (!px.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("condition_images: ", px.status().message()));
  }
  ASSIGN_OR_RETURN(
      auto inputs, GuardTorch("Qwen2-VL pixel values", [&] {
        torch::Tensor values =
            torch::from_blob(px->values.data(), {px->rows, px->cols}, torch::kFloat32).clone();
        std::vector<int64_t> flat;
        for (const auto& g : px->grid_thw) flat.insert(flat.end(), g.begin(), g.end());
        torch::Tensor grids =
            torch::tensor(flat, torch::kInt64).view({static_cast<int64_t>(px->grid_thw.size()), 3});
        return std::make_pair(values, grids);
      }));
  return tower_->Forward(inputs.first, inputs.second);
}

}  // namespace ditserve::pipeline
