#include "models/text/causal_lm_loader.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sharding/checkpoint.h"
#include "sharding/tp_plan.h"

namespace ditserve::text {

absl::StatusOr<LoadedCausalLm> LoadCausalLmTextEncoder(const std::string& component_dir,
                                                       comm::Communicator* comm,
                                                       sharding::LoadOptions opts,
                                                       LlmAttentionImplementation implementation) {
  if (comm == nullptr) return absl::InvalidArgumentError("LoadCausalLmTextEncoder: no communicator");
  ASSIGN_OR_RETURN(auto ckpt, sharding::ComponentCheckpoint::Open(component_dir));
  ASSIGN_OR_RETURN(CausalLmConfig config,
                   ParseCausalLmConfig(ckpt->config().dump(), component_dir + "/config.json"));
  auto prefix = sharding::DetectTextModelPrefix(config.class_name, [&](const std::string& n) {
    return ckpt->tensors().count(n) != 0;
  });
  if (!prefix.ok()) {
    return absl::Status(prefix.status().code(),
                        absl::StrCat(component_dir, ": ", prefix.status().message()));
  }
  // What sharding::BuiltinTpPlanForCheckpoint gives, with the class the config parser settled on
  // (architectures[0], or the model_type when a config has no architectures).
  ASSIGN_OR_RETURN(sharding::TpPlan plan,
                   sharding::BuiltinTpPlan(config.class_name, ckpt->config(), *prefix));
  opts.select = [p = *prefix](const std::string& name) { return absl::StartsWith(name, p); };
  ASSIGN_OR_RETURN(sharding::ShardedStateDict sd,
                   sharding::LoadShard(*ckpt, &plan, comm->rank(), comm->world_size(), opts));
  LoadedCausalLm out;
  out.weight_bytes = sd.TotalBytes();
  auto model = CausalLmTextEncoder::Load(config, sd, comm, implementation);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(component_dir, ": ", model.status().message()));
  }
  out.model = std::move(*model);
  return out;
}

}  // namespace ditserve::text
