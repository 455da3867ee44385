// Loading steps every pipeline family shares: the loader options from the pipeline's options, this
// rank's tensor-parallel shard of the transformer through its built-in plan, and the scheduler
// configuration. Call on the rank's device thread; errors name the folder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/lora/lora_library.h"
#include "models/text/causal_lm_encoder.h"
#include "models/transformer.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"
#include "sharding/loader.h"

namespace ditserve::pipeline {

sharding::LoadOptions ShardLoadOptions(const PipelineOptions& options);

struct LoadedTransformer {
  std::unique_ptr<models::DiffusionTransformer> model;
  nlohmann::json config;  // config.json
  uint64_t weight_bytes = 0;
};

// Bytes of a loaded transformer on this rank: the state dict's tensors (what FP8 quantization
// released counts nothing) plus the FP8 weights and scales its layers hold.
uint64_t TransformerWeightBytes(const sharding::ShardedStateDict& sd,
                                const models::DiffusionTransformer& model);

// The load options a transformer gets from the pipeline's options (FP8 weights).
models::TransformerLoadOptions TransformerOptions(const PipelineOptions& options);

// This rank's shard of the transformer in `dir` (config.json's _class_name picks the class and
// its plan).
absl::StatusOr<LoadedTransformer> LoadTransformer(const std::string& dir,
                                                  const PipelineOptions& options,
                                                  comm::Communicator* comm);

// An LLM text encoder (models/text/causal_lm_encoder.h) for a pipeline: this rank's slice when
// `sharded` (Forward is then a collective of `comm`'s group), else a full replica on a private
// single-rank group (`own_comm`, which must outlive `model`).
struct LoadedTextModel {
  std::unique_ptr<comm::Communicator> own_comm;
  std::unique_ptr<text::CausalLmTextEncoder> model;
  uint64_t weight_bytes = 0;
};
absl::StatusOr<LoadedTextModel> LoadTextModel(const std::string& text_encoder_dir,
                                              const PipelineOptions& options,
                                              comm::Communicator* comm, bool sharded);

// Whether a pipeline's LLM text encoder in `text_encoder_dir` runs sharded over the ranks:
// kSharded / kRank0 as asked; kAuto shards when the group has several ranks, the weights in `dtype`
// exceed kShardTextEncoderAboveBytes and the degree keeps whole key/value groups on every rank.
absl::StatusOr<bool> ShardTextEncoder(const std::string& text_encoder_dir,
                                      TextEncoderPlacement placement, torch::ScalarType dtype,
                                      const comm::Communicator& comm);

// This rank's slices of options.loras for `model` (an empty library when there are none).
absl::StatusOr<std::unique_ptr<lora::LoraLibrary>> LoadLoras(const PipelineOptions& options,
                                                            const models::DiffusionTransformer& model,
                                                            const comm::Communicator& comm);

// `dir`/scheduler_config.json parsed, or `fallback` when `dir` is empty.
absl::StatusOr<FlowMatchSchedulerConfig> LoadSchedulerConfig(const std::string& dir,
                                                             const FlowMatchSchedulerConfig& fallback);

}  // namespace ditserve::pipeline
