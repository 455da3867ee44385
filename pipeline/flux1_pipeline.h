// Flux1Pipeline: FluxPipeline (FLUX.1-dev / -schnell) for one rank, on the DiffusionPipeline
// skeleton (diffusion_pipeline.h: the load sequence, a job's flow, the contracts across ranks).
// Every rank holds its shard of the transformer; rank 0 also holds the text encoders (CLIP + T5)
// and the VAE (no other rank loads them).
//
// What FLUX.1 supplies: the conditioning (prompt embeddings + pooled CLIP embedding), from the
// request or encoded on rank 0 and broadcast (the ranks agree on an encode failure first, so a bad
// prompt never strands a rank in the broadcast); the latent layout (noise (B, C/4, h, w)
// 2x2-packed, image ids (0, y, x), text ids zeros); the guidance embedding (guidance-distilled
// -dev); true CFG with a negative prompt, plainly combined; decode: unpack, then the AutoencoderKL.
//
// Input images (when the VAE has its encoder), as diffusers' pipelines on the same folder:
//   * FluxPipeline folder: image-to-image (FluxImg2ImgPipeline; card ImageUse::kImageToImage): the
//     one image, resized by the frontend to the output size, is encoded on rank 0, sampled from
//     its posterior with the item's generator (before the noise, as diffusers draws), shifted and
//     scaled, broadcast; the skeleton noises it to the strength's first step.
//   * FluxKontextPipeline folder (ImageUse::kKontext): the condition image (resized by the frontend
//     to the preferred Kontext resolution) is encoded on rank 0 (the mode), shifted, scaled, packed
//     and broadcast; its tokens follow the latents with ids (1, y, x).
//
// Model folder: a FluxPipeline or FluxKontextPipeline root (its VAE and text encoders required).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/flux1/flux1_config.h"
#include "models/vae/autoencoder_kl.h"
#include "pipeline/diffusion_pipeline.h"
#include "pipeline/flux1_prompt_encoder.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

class Flux1Pipeline final : public DiffusionPipeline {
 private:
  friend DiffusionPipeline;  // Create constructs it
  Flux1Pipeline();
  // A FluxKontextPipeline folder (model_index.json): its input image is the condition image.
  bool kontext() const { return pipeline_class() == "FluxKontextPipeline"; }

  // CLIP and T5 on rank 0 (Flux1PromptEncoder), which encodes every job and broadcasts.
  absl::Status LoadTextSide(const sharding::PipelineIndex* index,
                            const PipelineOptions& options) override;
  // dev or schnell defaults; one input image (image to image, or Kontext's condition image).
  void FillCard(ModelCard* card) const override;

  absl::StatusOr<TextConditioning> EncodeText(const GenerationJob& job, bool negative) override;
  // Rank 0 encodes the items' prompts and broadcasts (embeds, pooled) to every rank.
  absl::StatusOr<TextConditioning> BroadcastEncoded(const GenerationJob& job, bool negative);
  // The grid is the skeleton's default (2x2-packed latents).
  absl::StatusOr<LatentLayout> LayOutLatents(const GenerationJob& job, const LatentGrid& grid,
                                             const torch::Tensor& noise,
                                             const TextConditioning& text) override;
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& latents,
                                       const LatentGrid& grid) const override;
  absl::StatusOr<ImageConditioning> ConditionOnImages(const GenerationJob& job,
                                                      const LatentGrid& grid) override;
  absl::StatusOr<ImageConditioning> ImageToImage(const GenerationJob& job, const LatentGrid& grid);
  absl::StatusOr<ImageConditioning> Kontext(const GenerationJob& job);

  // FluxTransformer2DModel's config (3-axis RoPE, the pooled CLIP projection).
  models::flux1::FluxTransformerConfig config_;
  std::unique_ptr<Flux1PromptEncoder> encoder_;  // rank 0 only
  std::optional<vae::AutoencoderKL> vae_;        // rank 0 only
};

}  // namespace ditserve::pipeline
