// Flux1Pipeline: FluxPipeline (FLUX.1-dev / -schnell) for one rank, on the DiffusionPipeline
// skeleton (diffusion_pipeline.h: the load sequence, a job's flow, the contracts across ranks).
// Every rank holds its shard of the transformer; rank 0 also holds the text encoders (CLIP + T5)
// and the VAE (no other rank loads them).
//
// What FLUX.1 supplies: the conditioning (prompt embeddings + pooled CLIP embedding), from the
// request or encoded on rank 0 and broadcast (the ranks agree on an encode failure first, so a bad
// prompt never strands a rank in the broadcast); the latent layout (noise (B, C/4, h, w) 2x2-packed,
// image ids (0, y, x), text ids zeros); the guidance embedding (guidance-distilled -dev); true CFG
// with a negative prompt, plainly combined; decode: unpack, then the AutoencoderKL.
//
// Model folder: a FluxPipeline root (its VAE and text encoders are required).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "models/flux1/flux1_config.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "pipeline/diffusion_pipeline.h"
#include "pipeline/flux1_prompt_encoder.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

class Flux1Pipeline final : public DiffusionPipeline {
 public:
  static absl::StatusOr<std::unique_ptr<Flux1Pipeline>> Load(const sharding::PipelineIndex& index,
                                                             const PipelineOptions& options,
                                                             comm::Communicator* comm);

 private:
  Flux1Pipeline();

  absl::StatusOr<TransformerShape> ParseTransformerConfig(const nlohmann::json& config) override;
  absl::StatusOr<int64_t> LoadVae(const std::string& vae_dir, const PipelineOptions& options) override;
  absl::Status LoadTextSide(const sharding::PipelineIndex* index,
                            const PipelineOptions& options) override;
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

  models::flux1::FluxTransformerConfig config_;
  std::unique_ptr<Flux1PromptEncoder> encoder_;   // rank 0 only
  std::optional<vae::AutoencoderKLDecoder> vae_;  // rank 0 only
};

}  // namespace ditserve::pipeline
