// Loading steps every pipeline family shares: the loader options from the pipeline's options, this
// rank's tensor-parallel shard of the transformer through its built-in plan, and the scheduler
// configuration. Call on the rank's device thread; errors name the folder.
#pragma once

#include <cstdint>
#include <functional>
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
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

sharding::LoadOptions ShardLoadOptions(const PipelineOptions& options);

struct LoadedTransformer {
  std::unique_ptr<models::DiffusionTransformer> model;
  uint64_t weight_bytes = 0;
};

// `status` with "<dir>/config.json: " in front of its message (OK stays OK), so that a config
// error names its file.
absl::Status InComponentConfig(const std::string& dir, const absl::Status& status);

// `config`'s "_class_name" ("" when absent or null); INVALID_ARGUMENT naming `dir`'s config.json
// and the field when it is not a string. `config` is `dir`/config.json's JSON.
absl::StatusOr<std::string> ComponentClassName(const std::string& dir,
                                               const nlohmann::json& config);

// Bytes of a loaded transformer on this rank: the state dict's tensors (what FP8 quantization
// released counts nothing) plus the FP8 weights and scales its layers hold.
uint64_t TransformerWeightBytes(const sharding::ShardedStateDict& sd,
                                const models::DiffusionTransformer& model);

// The load options a transformer gets from the pipeline's options (FP8 weights).
models::TransformerLoadOptions TransformerOptions(const PipelineOptions& options);

// This rank's shard of the transformer in `dir` (config.json's _class_name picks the class and
// its plan). `read_config` (the pipeline's own reading of config.json) runs first, before any
// weight is read; its errors, like every config error here, come back naming the file.
absl::StatusOr<LoadedTransformer> LoadTransformer(
    const std::string& dir, const PipelineOptions& options, comm::Communicator* comm,
    const std::function<absl::Status(const nlohmann::json&)>& read_config);

// The whole of the component in `dir` (no plan: every tensor), in options' device and dtype, for a
// replica one rank holds (a VAE on rank 0). No progress reports (they count the transformer).
absl::StatusOr<sharding::ShardedStateDict> LoadWholeComponent(const std::string& dir,
                                                              const PipelineOptions& options);

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

// Where the LLM text encoder of a FLUX.2 / Qwen-Image folder lives, decided at load by every rank
// alike (ShardTextEncoder): `present` when the folder (`index`, null for a transformer folder
// alone) has both a text_encoder and a tokenizer.
struct LlmTextEncoderSite {
  bool present = false;
  bool sharded = false;  // every rank holds a slice and encodes (a collective); else rank 0 alone
  std::string text_encoder_dir;
  std::string tokenizer_dir;
  // Whether `rank` holds (loads and runs) the encoder.
  bool HeldBy(int64_t rank) const { return present && (sharded || rank == 0); }
};
// A FLUX.2 / Qwen-Image pipeline's LLM text encoder: where it lives, and the encoder itself on
// the ranks that hold it (null elsewhere, and when the folder has none).
template <typename Encoder>
struct LlmTextEncoder {
  LlmTextEncoderSite site;  // every rank knows
  std::unique_ptr<Encoder> encoder;
};
absl::StatusOr<LlmTextEncoderSite> PlaceLlmTextEncoder(const sharding::PipelineIndex* index,
                                                       const PipelineOptions& options,
                                                       const comm::Communicator& comm);

// This rank's slices of options.loras for `model` (an empty library when there are none).
absl::StatusOr<std::unique_ptr<lora::LoraLibrary>> LoadLoras(
    const PipelineOptions& options, const models::DiffusionTransformer& model,
    const comm::Communicator& comm);

// `dir`/scheduler_config.json parsed; errors name the file.
absl::StatusOr<FlowMatchSchedulerConfig> LoadSchedulerConfig(const std::string& dir);

}  // namespace ditserve::pipeline
