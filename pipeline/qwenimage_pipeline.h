// QwenImagePipeline: diffusers' QwenImagePipeline for one rank, on the DiffusionPipeline skeleton
// (diffusion_pipeline.h: the load sequence, a job's flow, the contracts across ranks). Every rank
// holds its shard of the transformer. The conditioning (prompt embeddings with their text mask)
// comes from the request or from the Qwen2.5-VL text encoder (sharded over the ranks, or a replica
// on rank 0 that broadcasts); true classifier-free guidance (a negative prompt with
// true_cfg_scale > 1) runs the conditional and unconditional passes and combines them with the
// reference's norm-preserving rescale (two batch-1 passes, as diffusers: one padded, masked batch
// of two measured 4-12 % slower on the H200,
// bench/results/2026-12-03-h200-qwenimage-cfg-batch.txt); rank 0 decodes with the Qwen-Image VAE
// when the folder has one, else returns latents.
//
// Latent layout (diffusers' prepare_latents): noise (B, C, 1, h, w) drawn in 5-D for the 3-D VAE
// (the same values as (B, C, h, w)), 2x2-packed into (B, tokens, 4C); img_shapes (1, h/2, w/2) per
// item; schedule: FluxSigmas with mu from calculate_shift over the packed tokens.
//
// Image to image (a QwenImagePipeline folder whose VAE has its encoder, as diffusers'
// QwenImageImg2ImgPipeline on it; card ImageUse::kImageToImage): the one image, resized by the
// frontend to the output size, is encoded on rank 0, sampled from its posterior with the item's
// generator (before the noise), shifted and scaled by (z - mean) * (1 / std), broadcast; the
// skeleton noises it to the strength's first step.
//
// Editing (a QwenImageEditPlusPipeline folder, Qwen-Image-Edit-2509; card ImageUse::kQwenEdit when
// the VAE has its encoder): 1 to kMaxEditImages input images, each prepared twice by the frontend
// (imaging/qwen_edit_sizes.h). The prompts (and the negative prompt) are encoded WITH the images:
// the condition images through the processor and the vision tower (qwen_edit_vision.h: on rank 0,
// its embeddings broadcast when the language model is sharded), the edit template with
// "Picture i:" vision blocks, 3-D M-RoPE positions, 64 template tokens dropped
// (QwenImagePromptEncoder::EncodeEdit); a job is one request, encoded once and repeated over its
// items (num_images_per_prompt). The VAE images are encoded on rank 0 (mode, (z - mean) / std),
// 2x2-packed and broadcast as reference tokens after the latents; img_shapes lists the output's
// grid, then each reference's; the velocity keeps the latents' tokens.
//
// Model folder: a QwenImagePipeline or QwenImageEditPlusPipeline root (the latter's processor/
// component required with its text encoder), or a QwenImageTransformer2DModel folder alone
// (latents only, the published scheduler configuration).
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/qwenimage/qwenimage_config.h"
#include "models/vae/autoencoder_kl_qwenimage.h"
#include "pipeline/llm_text_pipeline.h"
#include "pipeline/qwen_edit_vision.h"
#include "pipeline/qwenimage_prompt_encoder.h"

namespace ditserve::pipeline {

class QwenImagePipeline final : public LlmTextPipeline<QwenImagePromptEncoder> {
 public:
  // Qwen-Image-Edit-2509's documented range of input images (Qwen-Image-Edit takes one).
  static constexpr int kMaxEditImages = 3;

 private:
  friend DiffusionPipeline;  // Create constructs it
  QwenImagePipeline();
  // A QwenImageEditPlusPipeline (Qwen-Image-Edit-2509: 1 to 3 images, "Picture i:" labels, ~384²
  // condition images) or QwenImageEditPipeline (Qwen-Image-Edit: one image, a bare vision block,
  // the ~1024² image for both encoders) folder (model_index.json).
  bool edit_plus() const { return pipeline_class() == "QwenImageEditPlusPipeline"; }
  bool edit() const { return edit_plus() || pipeline_class() == "QwenImageEditPipeline"; }

  // The text encoder; for editing also the processor's settings and tokenizer on the ranks that
  // hold the encoder, and the vision tower on rank 0.
  absl::Status LoadTextSide(const sharding::PipelineIndex* index,
                            const PipelineOptions& options) override;
  // Text masks accepted; true CFG's default scale with a negative prompt; editing's image inputs.
  void FillCard(ModelCard* card) const override;

  // Editing: the items of a job are one request's (same prompts, condition images as images).
  absl::Status CheckJob(const GenerationJob& job) const override;
  absl::StatusOr<TextConditioning> EncodeText(const GenerationJob& job, bool negative) override;
  // The request's embeddings (and masks, when any item has one) stacked.
  absl::StatusOr<TextConditioning> FromRequest(const GenerationJob& job, bool negative);
  // The prompts encoded: by the sharded encoder, or on rank 0 and broadcast (length first).
  absl::StatusOr<TextConditioning> EncodePrompts(const GenerationJob& job, bool negative);
  // Editing: the first item's prompt with its condition images, repeated over the items.
  absl::StatusOr<TextConditioning> EncodeEditPrompts(const GenerationJob& job, bool negative);
  // The condition images through the vision tower (rank 0's, broadcast to every rank when
  // `broadcast`: a collective), computed for the prompt's pass and reused by the negative
  // prompt's, which under true CFG follows it in the same job (EncodeText's order).
  absl::StatusOr<torch::Tensor> EditImageEmbeds(const JobItem& item, bool negative,
                                                const std::vector<std::array<int64_t, 3>>& grids,
                                                bool broadcast);
  // Rank 0's (embeds (B, L, D), mask (B, L)) from `encode` on every rank: L first, then both.
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> BroadcastEncoded(
      int64_t batch,
      const std::function<absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>>()>& encode);
  // The grid is the skeleton's default (2x2-packed latents); img_shapes add the references'.
  absl::StatusOr<LatentLayout> LayOutLatents(const GenerationJob& job, const LatentGrid& grid,
                                             const torch::Tensor& noise,
                                             const TextConditioning& text) override;
  // Editing: the VAE images' packed latents as reference tokens; else image to image.
  absl::StatusOr<ImageConditioning> ConditionOnImages(const GenerationJob& job,
                                                      const LatentGrid& grid) override;
  absl::StatusOr<ImageConditioning> ImageToImage(const GenerationJob& job, const LatentGrid& grid);
  // The guided velocity, rescaled per token to the conditional prediction's norm.
  torch::Tensor CombineGuidance(const torch::Tensor& cond, const torch::Tensor& uncond,
                                const torch::Tensor& scale) const override;
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& latents,
                                       const LatentGrid& grid) const override;

  // QwenImageTransformer2DModel's config (the 3-D video RoPE over frame, height, width).
  models::qwenimage::QwenImageTransformerConfig config_;
  std::optional<vae::AutoencoderKLQwenImage> vae_;  // rank 0 only, when the folder has one
  // Editing, on the ranks that hold the text encoder (the tower itself on rank 0 only).
  std::optional<QwenEditVision> vision_;
  // The current job's image embeddings (EditImageEmbeds), on the ranks that computed them.
  torch::Tensor edit_image_embeds_;
};

}  // namespace ditserve::pipeline
