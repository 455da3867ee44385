// EmbeddingsPipeline: FLUX.2 and Qwen-Image, whose text encoders (a Mistral-family and a
// Qwen2.5-VL LLM) and VAEs are not built in. A request brings precomputed prompt embeddings
// (and, for Qwen-Image, optionally a text mask); every rank runs the tensor-parallel denoising
// loop with the family's latent layout, schedule and guidance, and rank 0 returns the final
// packed latents (OUTPUT_FORMAT_LATENTS only).
//
// Model folder: a pipeline root (Flux2Pipeline / QwenImagePipeline: transformer/ and scheduler/
// are used) or a transformer folder alone (the scheduler then uses the family's published
// configuration).
#pragma once

#include <memory>
#include <string>

#include "models/transformer.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"

namespace ditserve::pipeline {

enum class EmbeddingsFamily { kFlux2, kQwenImage };

class EmbeddingsPipeline final : public Pipeline {
 public:
  // `transformer_dir` holds config.json + weights; `scheduler_dir` may be empty.
  static absl::StatusOr<std::unique_ptr<EmbeddingsPipeline>> Load(
      const std::string& name, const std::string& transformer_dir, const std::string& scheduler_dir,
      const PipelineOptions& options, comm::Communicator* comm);

  worker::v1::ModelDescription Describe() const override;
  absl::StatusOr<worker::v1::RunResult> Run(
      const worker::v1::RunRequest& request, const std::function<void(const StepEvent&)>& on_step,
      const std::function<bool()>& cancel_requested) override;
  absl::StatusOr<torch::Tensor> Forward(const std::map<std::string, torch::Tensor>& inputs) override;
  uint64_t weight_bytes() const override { return weight_bytes_; }

 private:
  EmbeddingsPipeline() = default;

  std::string name_;
  EmbeddingsFamily family_ = EmbeddingsFamily::kFlux2;
  comm::Communicator* comm_ = nullptr;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  std::unique_ptr<models::DiffusionTransformer> transformer_;
  FlowMatchSchedulerConfig scheduler_config_;
  int64_t in_channels_ = 0;
  int64_t joint_attention_dim_ = 0;
  bool guidance_embeds_ = false;
  uint64_t weight_bytes_ = 0;
};

}  // namespace ditserve::pipeline
