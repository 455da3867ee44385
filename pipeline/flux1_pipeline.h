// Flux1Pipeline: FluxPipeline (FLUX.1-dev / -schnell) for one rank. Every rank holds its shard of
// the transformer; rank 0 also holds the text encoders and the VAE (no other rank loads them).
//
// A job on every rank: rank 0 encodes the prompts and broadcasts the embeddings (ranks agree on
// an encode failure first, so a bad prompt never strands a rank in the broadcast); each rank
// draws the same seeded noise (torch CPU generator, as diffusers with a CPU generator), runs the
// tensor-parallel denoising loop in lock step; rank 0 decodes and encodes the images.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "models/flux1/flux1_transformer.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "pipeline/flux1_prompt_encoder.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

class Flux1Pipeline final : public Pipeline {
 public:
  static absl::StatusOr<std::unique_ptr<Flux1Pipeline>> Load(const sharding::PipelineIndex& index,
                                                             const PipelineOptions& options,
                                                             comm::Communicator* comm);

  const ModelCard& Card() const override { return card_; }
  absl::StatusOr<GenerationResult> Run(const GenerationJob& job, const StepCallback& on_step,
                                       const CancelPredicate& cancel_requested) override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  models::StepGraphStats transformer_graph_stats() const override {
    return transformer_->graph_stats();
  }

 private:
  struct Conditioning {
    torch::Tensor prompt_embeds;   // (B, T, joint_attention_dim), model dtype, on the device
    torch::Tensor pooled;          // (B, pooled_projection_dim)
  };

  Flux1Pipeline() = default;
  // Every rank: the conditioning of the items (negative = the negative prompts) — from the
  // request's embeddings, or encoded on rank 0 and broadcast.
  absl::StatusOr<Conditioning> Condition(const GenerationJob& job, bool negative);
  absl::StatusOr<GenerationResult> RunUnguarded(const GenerationJob& job, const StepCallback& on_step,
                                                const CancelPredicate& cancel_requested);

  ModelCard card_;
  comm::Communicator* comm_ = nullptr;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  std::unique_ptr<models::flux1::FluxTransformer2DModel> transformer_;
  std::unique_ptr<lora::LoraLibrary> loras_;  // after transformer_: borrows its layers
  FlowMatchSchedulerConfig scheduler_config_;
  int64_t vae_scale_factor_ = 8;
  std::unique_ptr<Flux1PromptEncoder> encoder_;             // rank 0 only
  std::optional<vae::AutoencoderKLDecoder> vae_;            // rank 0 only
  uint64_t weight_bytes_ = 0;
};

}  // namespace ditserve::pipeline
