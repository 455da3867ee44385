#include "pipeline/component_loading.h"

#include "absl/strings/str_cat.h"
#include "comm/local_communicator.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/text/causal_lm_config.h"
#include "models/text/causal_lm_loader.h"
#include "models/transformer_factory.h"
#include "sharding/checkpoint.h"
#include "sharding/tp_plan.h"

namespace ditserve::pipeline {

sharding::LoadOptions ShardLoadOptions(const PipelineOptions& options) {
  sharding::LoadOptions lo;
  lo.device = options.device;
  lo.dtype = options.dtype;
  lo.staging_buffer_bytes = options.staging_buffer_bytes;
  lo.progress = options.on_load_progress;
  return lo;
}

uint64_t TransformerWeightBytes(const sharding::ShardedStateDict& sd,
                                const models::DiffusionTransformer& model) {
  uint64_t bytes = sd.TotalBytes();
  for (const auto& [path, layer] : model.linear_layers().layers()) {
    if (!layer->is_fp8()) continue;
    bytes += layer->weight().nbytes() + layer->fp8_scale().nbytes();
  }
  return bytes;
}

models::TransformerLoadOptions TransformerOptions(const PipelineOptions& options) {
  models::TransformerLoadOptions t;
  t.weights = options.weights;
  t.cuda_graphs = options.cuda_graphs;
  return t;
}

absl::Status InComponentConfig(const std::string& dir, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(dir, "/config.json: ", status.message()));
}

absl::StatusOr<std::string> ComponentClassName(const std::string& dir,
                                               const nlohmann::json& config) {
  absl::StatusOr<std::string> name = JsonField<std::string>(config, "_class_name", "");
  RETURN_IF_ERROR(InComponentConfig(dir, name.status()));
  return name;
}

absl::StatusOr<LoadedTransformer> LoadTransformer(
    const std::string& dir, const PipelineOptions& options, comm::Communicator* comm,
    const std::function<absl::Status(const nlohmann::json&)>& read_config) {
  LoadedTransformer out;
  ASSIGN_OR_RETURN(nlohmann::json config, sharding::ReadComponentConfig(dir));
  RETURN_IF_ERROR(InComponentConfig(dir, read_config(config)));
  ASSIGN_OR_RETURN(std::string class_name, ComponentClassName(dir, config));
  ASSIGN_OR_RETURN(sharding::TpPlan plan, sharding::BuiltinTpPlan(class_name, config));
  // At tp 1 there is nothing to split (and the replicated layer is one addmm).
  if (options.shard_modulation && comm->world_size() > 1) sharding::AddModulationSharding(&plan);
  ASSIGN_OR_RETURN(
      sharding::ShardedStateDict sd,
      sharding::LoadShard(dir, &plan, comm->rank(), comm->world_size(), ShardLoadOptions(options)));
  ASSIGN_OR_RETURN(out.model,
                   models::CreateTransformer(config, sd, comm, TransformerOptions(options)));
  out.weight_bytes = TransformerWeightBytes(sd, *out.model);
  return out;
}

absl::StatusOr<sharding::ShardedStateDict> LoadWholeComponent(const std::string& dir,
                                                              const PipelineOptions& options) {
  sharding::LoadOptions lo = ShardLoadOptions(options);
  lo.progress = nullptr;
  return sharding::LoadShard(dir, nullptr, 0, 1, lo);
}

absl::StatusOr<LoadedTextModel> LoadTextModel(const std::string& text_encoder_dir,
                                              const PipelineOptions& options,
                                              comm::Communicator* comm, bool sharded) {
  LoadedTextModel out;
  if (!sharded) {
    out.own_comm = comm::MakeSingleRankCommunicator();
    comm = out.own_comm.get();
  }
  sharding::LoadOptions lo = ShardLoadOptions(options);
  lo.progress = nullptr;
  ASSIGN_OR_RETURN(text::LoadedCausalLm loaded,
                   text::LoadCausalLmTextEncoder(text_encoder_dir, comm, lo));
  out.model = std::move(loaded.model);
  out.weight_bytes = loaded.weight_bytes;
  return out;
}

absl::StatusOr<bool> ShardTextEncoder(const std::string& text_encoder_dir,
                                      TextEncoderPlacement placement, torch::ScalarType dtype,
                                      const comm::Communicator& comm) {
  if (placement != TextEncoderPlacement::kAuto) return placement == TextEncoderPlacement::kSharded;
  const int64_t world = comm.world_size();
  if (world == 1) return false;
  ASSIGN_OR_RETURN(std::unique_ptr<sharding::ComponentCheckpoint> ckpt,
                   sharding::ComponentCheckpoint::Open(text_encoder_dir));
  uint64_t elements = 0;
  for (const auto& [name, loc] : ckpt->tensors()) elements += loc.info->numel();
  const uint64_t bytes = elements * static_cast<uint64_t>(c10::elementSize(dtype));
  ASSIGN_OR_RETURN(text::CausalLmConfig config,
                   text::LoadCausalLmConfig(text_encoder_dir + "/config.json"));
  return bytes > kShardTextEncoderAboveBytes && config.num_attention_heads % world == 0 &&
         config.num_key_value_heads % world == 0;
}

absl::StatusOr<LlmTextEncoderSite> PlaceLlmTextEncoder(const sharding::PipelineIndex* index,
                                                       const PipelineOptions& options,
                                                       const comm::Communicator& comm) {
  LlmTextEncoderSite site;
  if (index == nullptr) return site;
  absl::StatusOr<std::string> te_dir = index->ComponentDir("text_encoder");
  absl::StatusOr<std::string> tok_dir = index->ComponentDir("tokenizer");
  if (!te_dir.ok() || !tok_dir.ok()) return site;
  site.present = true;
  site.text_encoder_dir = *te_dir;
  site.tokenizer_dir = *tok_dir;
  ASSIGN_OR_RETURN(
      site.sharded,
      ShardTextEncoder(site.text_encoder_dir, options.text_encoder_placement, options.dtype, comm));
  return site;
}

absl::StatusOr<std::unique_ptr<lora::LoraLibrary>> LoadLoras(
    const PipelineOptions& options, const models::DiffusionTransformer& model,
    const comm::Communicator& comm) {
  if (options.loras.empty()) return std::make_unique<lora::LoraLibrary>();
  sharding::LoadOptions lo = ShardLoadOptions(options);
  lo.progress = nullptr;
  lo.device = model.device();
  lo.dtype = model.dtype();
  ASSIGN_OR_RETURN(auto lib,
                   lora::LoraLibrary::Load(options.loras, model.linear_layers(), comm.rank(),
                                           comm.world_size(), lo, options.lora_mode));
  lib->set_merge_max_bytes(options.lora_merge_max_bytes);
  return lib;
}

absl::StatusOr<FlowMatchSchedulerConfig> LoadSchedulerConfig(const std::string& dir) {
  const std::string path = dir + "/scheduler_config.json";
  ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(path));
  absl::StatusOr<FlowMatchSchedulerConfig> config = ParseFlowMatchSchedulerConfig(j);
  if (config.ok()) return config;
  return absl::Status(config.status().code(), absl::StrCat(path, ": ", config.status().message()));
}

}  // namespace ditserve::pipeline
