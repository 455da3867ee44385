#include "pipeline/component_loading.h"

#include "common/config_json.h"
#include "common/status_macros.h"
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

absl::StatusOr<LoadedTransformer> LoadTransformer(const std::string& dir,
                                                  const PipelineOptions& options,
                                                  comm::Communicator* comm) {
  LoadedTransformer out;
  ASSIGN_OR_RETURN(out.config, sharding::ReadComponentConfig(dir));
  ASSIGN_OR_RETURN(sharding::TpPlan plan,
                   sharding::BuiltinTpPlan(out.config.value("_class_name", ""), out.config));
  ASSIGN_OR_RETURN(sharding::ShardedStateDict sd,
                   sharding::LoadShard(dir, &plan, comm->rank(), comm->world_size(),
                                       ShardLoadOptions(options)));
  ASSIGN_OR_RETURN(out.model, models::CreateTransformer(out.config, sd, comm));
  out.weight_bytes = sd.TotalBytes();
  return out;
}

absl::StatusOr<FlowMatchSchedulerConfig> LoadSchedulerConfig(const std::string& dir,
                                                             const FlowMatchSchedulerConfig& fallback) {
  if (dir.empty()) return fallback;
  ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(dir + "/scheduler_config.json"));
  return ParseFlowMatchSchedulerConfig(j);
}

}  // namespace ditserve::pipeline
