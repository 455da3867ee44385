// QwenImagePipeline: diffusers' QwenImagePipeline for one rank. Every rank holds its shard of the
// transformer. The conditioning (prompt embeddings with their text mask) comes from the request or
// from the Qwen2.5-VL text encoder; true classifier-free guidance (a negative prompt with
// true_cfg_scale > 1) runs the conditional and unconditional passes and combines them with the
// reference's norm-preserving rescale (two batch-1 passes, as diffusers: one padded, masked batch
// of two measured 4-12 % slower on the H200, bench/results/2026-12-03-h200-qwenimage-cfg-batch.txt); rank 0 decodes with the Qwen-Image VAE when the folder has
// one, else returns latents.
//
// Latent layout (diffusers' prepare_latents): noise (B, C, 1, h, w) drawn in 5-D for the 3-D VAE
// (the same values as (B, C, h, w)), 2x2-packed into (B, tokens, 4C); img_shapes (1, h/2, w/2) per
// item; schedule: FluxSigmas with mu from calculate_shift over the packed tokens.
//
// Model folder: a QwenImagePipeline root, or a QwenImageTransformer2DModel folder alone (latents
// only, the published scheduler configuration).
#pragma once

#include <memory>
#include <string>

#include "models/transformer.h"
#include "models/vae/autoencoder_kl_qwenimage.h"
#include "pipeline/pipeline.h"
#include "pipeline/qwenimage_prompt_encoder.h"
#include "pipeline/scheduler.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

class QwenImagePipeline final : public Pipeline {
 public:
  // `index` is null for a transformer folder alone (`transformer_dir`).
  static absl::StatusOr<std::unique_ptr<QwenImagePipeline>> Load(
      const sharding::PipelineIndex* index, const std::string& transformer_dir,
      const PipelineOptions& options, comm::Communicator* comm);

  const ModelCard& Card() const override { return card_; }
  absl::StatusOr<GenerationResult> Run(const GenerationJob& job, const StepCallback& on_step,
                                       const CancelPredicate& cancel_requested) override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  models::StepGraphStats transformer_graph_stats() const override {
    return transformer_->graph_stats();
  }

 private:
  struct Conditioning {
    torch::Tensor embeds;  // (B, T, joint_attention_dim)
    torch::Tensor mask;    // (B, T) or undefined (diffusers passes none when nothing is masked)
  };

  QwenImagePipeline() = default;
  absl::StatusOr<Conditioning> Condition(const GenerationJob& job, bool negative);
  absl::StatusOr<Conditioning> Encode(const GenerationJob& job, bool negative);
  absl::StatusOr<GenerationResult> RunUnguarded(const GenerationJob& job, const StepCallback& on_step,
                                                const CancelPredicate& cancel_requested);

  ModelCard card_;
  comm::Communicator* comm_ = nullptr;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  std::unique_ptr<models::DiffusionTransformer> transformer_;
  std::unique_ptr<lora::LoraLibrary> loras_;  // after transformer_: borrows its layers
  FlowMatchSchedulerConfig scheduler_config_;
  int64_t in_channels_ = 0;
  int64_t joint_attention_dim_ = 0;
  int64_t vae_scale_factor_ = 8;
  uint64_t weight_bytes_ = 0;
  std::unique_ptr<QwenImagePromptEncoder> encoder_;  // every rank (sharded) or rank 0; null: none
  bool sharded_encoder_ = false;
  bool has_encoder_ = false;
  std::optional<vae::AutoencoderKLQwenImage> vae_;  // rank 0 only, when the folder has one
  bool has_vae_ = false;
};

}  // namespace ditserve::pipeline
