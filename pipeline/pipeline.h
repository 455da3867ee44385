// Pipeline: everything one rank runs for a generation job, behind one interface so the worker
// does not know model families. Each family (flux1_pipeline, flux2_pipeline, qwenimage_pipeline)
// owns its differences: conditioning, latent layout, schedule, guidance, decoding.
//
// Call order across ranks: every rank of the group calls Run with the same job, concurrently;
// ranks execute the same sequence of collectives. Cancellation is collective: at each step
// boundary each rank contributes its local cancel_requested() and all ranks agree (one all-reduce
// of a flag), so they stop at the same step and nobody is left inside a collective. Failures that
// happen before the denoising loop (a prompt rank 0 cannot encode, memory for the latents) are
// agreed on the same way, so every rank returns an error and the group stays usable. Only rank 0
// returns images or latents; the other ranks return an empty GenerationResult.
//
// Threads: one job at a time per Pipeline, on the thread that owns the rank's device (the worker's
// engine thread); Card() and weight_bytes() are immutable after Load and safe from any thread.
// Errors: Run returns a Status; it throws nothing (torch calls are guarded).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "common/model_flags.h"
#include "common/model_name.h"
#include "models/common/fp8_linear.h"
#include "models/common/step_graphs.h"
#include "pipeline/job.h"

namespace ditserve::pipeline {

struct StepEvent {
  uint32_t step = 0;  // 1-based
  uint32_t total = 0;
  double seconds = 0;  // the step's own time (a preview's decode is not in it)
  // GenerationJob::preview_images: on rank 0, after the steps PreviewSteps picks, one image per
  // item ((H, W, 3) float32 in [0, 1] on the CPU) of the clean latents the step predicts; empty
  // otherwise. preview_index counts them from 0.
  std::vector<torch::Tensor> previews;
  int preview_index = -1;
};

using StepCallback = std::function<void(const StepEvent&)>;
using CancelPredicate = std::function<bool()>;

// Where a pipeline's text encoder runs (FLUX.2, Qwen-Image): common/model_flags.h's type, whose
// kAuto shards above kShardTextEncoderAboveBytes.
using ::ditserve::TextEncoderPlacement;

// Text encoders larger than this are sharded under kAuto: 4 GiB of weights (FLUX.2-dev's 24 B
// Mistral is 48 GB in bf16; Qwen-Image's 7 B Qwen2.5-VL 15 GB; FLUX.1's CLIP + T5 are replicated).
inline constexpr uint64_t kShardTextEncoderAboveBytes = 4ull << 30;

struct PipelineOptions {
  std::string model_dir;  // pipeline root (model_index.json) or a transformer folder
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;
  uint64_t staging_buffer_bytes = 64ull << 20;
  TextEncoderPlacement text_encoder_placement = TextEncoderPlacement::kAuto;
  // Shard the transformer's AdaLN modulation projections (sharding::AddModulationSharding) instead
  // of replicating them as the reference's plans do (tp > 1 only).
  bool shard_modulation = true;
  // LoRA adapters to load at start (models/lora/lora_adapter.h); requests choose among them.
  std::vector<lora::LoraAdapterSpec> loras;
  lora::LoraMode lora_mode = lora::LoraMode::kMerge;  // models/lora/lora_library.h
  // kFp8: the transformer blocks' token GEMMs in FP8 (models/common/fp8_linear.h); the engine has
  // checked CheckFp8Supported.
  models::WeightFormat weights = models::WeightFormat::kModelDtype;
  // CUDA graphs of the transformer's forward kept (models/common/step_graphs.h; 0: off).
  int cuda_graphs = models::kDefaultCudaGraphs;
  uint64_t lora_merge_max_bytes = 0;  // LoraLibrary::set_merge_max_bytes (0: no limit)
  // (bytes loaded, bytes total) while loading this rank's shard.
  std::function<void(uint64_t, uint64_t)> on_load_progress;
};

class Pipeline {
 public:
  virtual ~Pipeline() = default;

  // What the frontend reports as ModelInfo (rank 0's answer is authoritative).
  virtual const ModelCard& Card() const = 0;

  virtual absl::StatusOr<GenerationResult> Run(const GenerationJob& job,
                                               const StepCallback& on_step,
                                               const CancelPredicate& cancel_requested) = 0;

  // Bytes of weights this rank holds on its device.
  virtual uint64_t weight_bytes() const = 0;

  // How the transformer's forwards ran so far (CUDA graph captures and replays). On the thread that
  // runs the pipeline.
  virtual models::StepGraphStats transformer_graph_stats() const = 0;
};

using ::ditserve::ModelNameFromDir;  // common/model_name.h

// "float32", "bfloat16", "float16".
const char* DtypeName(torch::ScalarType dtype);

// Loads this rank's part of the model in `options.model_dir` (the family is read from
// model_index.json or config.json). `comm` must outlive the pipeline.
absl::StatusOr<std::unique_ptr<Pipeline>> LoadPipeline(const PipelineOptions& options,
                                                       comm::Communicator* comm);

}  // namespace ditserve::pipeline
