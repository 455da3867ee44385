// Flux2Pipeline: diffusers' Flux2Pipeline (FLUX.2-dev) for one rank, on the DiffusionPipeline
// skeleton (diffusion_pipeline.h: the load sequence, a job's flow, the contracts across ranks).
// Every rank holds its shard of the transformer. The conditioning comes from the request's
// precomputed embeddings or from the Mistral text encoder (flux2_prompt_encoder.h: sharded over the
// ranks, or a replica on rank 0 that broadcasts); rank 0 decodes with the FLUX.2 VAE when the
// folder has one, else returns latents.
//
// Latent layout (diffusers' prepare_latents): noise drawn already patchified as
// (B, in_channels, H/16, W/16) for an 8x VAE, flattened row-major into (B, tokens, in_channels);
// image ids (0, y, x, 0), text ids (0, 0, 0, l); schedule: FluxSigmas with mu from
// compute_empirical_mu(tokens, steps) (the generated tokens only); guidance embedded
// (guidance-distilled); no negative prompt (a job with true CFG is refused).
//
// Reference images (Flux2Pipeline's `image`; card: ImageUse::kReference when the VAE has its
// encoder): each prepared image (imaging/preprocess.h) is encoded on rank 0 (mode, 2x2 patchify,
// batch-norm normalisation: AutoencoderKLFlux2::EncodeReference), packed into tokens and
// broadcast; the tokens follow the latents in every forward with ids (10 + 10 i, y, x, 0) for
// image i, and the velocity keeps the latents' tokens. The text side is untouched.
//
// Model folder: a Flux2Pipeline root, or a Flux2Transformer2DModel folder alone (latents only,
// the published scheduler configuration).
#pragma once

#include <optional>
#include <string>

#include "models/flux2/flux2_config.h"
#include "models/vae/autoencoder_kl_flux2.h"
#include "pipeline/flux2_prompt_encoder.h"
#include "pipeline/llm_text_pipeline.h"

namespace ditserve::pipeline {

class Flux2Pipeline final : public LlmTextPipeline<Flux2PromptEncoder> {
 private:
  friend DiffusionPipeline;  // Create constructs it
  Flux2Pipeline();

  // Up to kMaxReferenceImages reference images when the VAE has its encoder.
  void FillCard(ModelCard* card) const override;

  absl::Status CheckJob(const GenerationJob& job) const override;
  absl::StatusOr<TextConditioning> EncodeText(const GenerationJob& job, bool negative) override;
  // The prompts' embeddings from the text encoder (sharded, or rank 0's broadcast).
  absl::StatusOr<torch::Tensor> EncodePrompts(const GenerationJob& job);
  LatentGrid Grid(const GenerationJob& job) const override;
  absl::StatusOr<LatentLayout> LayOutLatents(const GenerationJob& job, const LatentGrid& grid,
                                             const torch::Tensor& noise,
                                             const TextConditioning& text) override;
  std::optional<double> ScheduleShift(const LatentGrid& grid, int steps) const override;
  absl::StatusOr<ImageConditioning> ConditionOnImages(const GenerationJob& job,
                                                      const LatentGrid& grid) override;
  absl::StatusOr<torch::Tensor> Decode(const torch::Tensor& latents,
                                       const LatentGrid& grid) const override;

  // Flux2Transformer2DModel's config (4-axis RoPE, the shared modulations).
  models::flux2::Flux2TransformerConfig config_;
  std::optional<vae::AutoencoderKLFlux2> vae_;   // rank 0 only, when the folder has one
};

}  // namespace ditserve::pipeline
