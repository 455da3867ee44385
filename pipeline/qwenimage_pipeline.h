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
// Model folder: a QwenImagePipeline root, or a QwenImageTransformer2DModel folder alone (latents
// only, the published scheduler configuration).
#pragma once

#include <optional>
#include <string>

#include "models/qwenimage/qwenimage_config.h"
#include "models/vae/autoencoder_kl_qwenimage.h"
#include "pipeline/llm_text_pipeline.h"
#include "pipeline/qwenimage_prompt_encoder.h"

namespace ditserve::pipeline {

class QwenImagePipeline final : public LlmTextPipeline<QwenImagePromptEncoder> {
 private:
  friend DiffusionPipeline;  // Create constructs it
  QwenImagePipeline();

  // QwenImageTransformer2DModel's config (the 3-D video RoPE over frame, height, width).
  absl::StatusOr<TransformerShape> ParseTransformerConfig(const nlohmann::json& config) override;
  // AutoencoderKLQwenImage, decoding one frame of its causal 3-D convolutions.
  absl::StatusOr<int64_t> LoadVae(const std::string& vae_dir,
                                  const PipelineOptions& options) override;
  // Text masks accepted; true CFG's default scale with a negative prompt.
  void FillCard(ModelCard* card) const override;

  absl::StatusOr<TextConditioning> EncodeText(const GenerationJob& job, bool negative) override;
  // The request's embeddings (and masks, when any item has one) stacked.
  absl::StatusOr<TextConditioning> FromRequest(const GenerationJob& job, bool negative);
  // The prompts encoded: by the sharded encoder, or on rank 0 and broadcast (length first).
  absl::StatusOr<TextConditioning> EncodePrompts(const GenerationJob& job, bool negative);
  // The grid is the skeleton's default (2x2-packed latents).
  absl::StatusOr<LatentLayout> LayOutLatents(const GenerationJob& job, const LatentGrid& grid,
                                             const torch::Tensor& noise,
                                             const TextConditioning& text) override;
  // The guided velocity, rescaled per token to the conditional prediction's norm.
  torch::Tensor CombineGuidance(const torch::Tensor& cond, const torch::Tensor& uncond,
                                const torch::Tensor& scale) const override;
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& latents,
                                       const LatentGrid& grid) const override;

  models::qwenimage::QwenImageTransformerConfig config_;
  std::optional<vae::AutoencoderKLQwenImage> vae_;   // rank 0 only, when the folder has one
};

}  // namespace ditserve::pipeline
