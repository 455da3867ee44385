#include "models/transformer_factory.h"

#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/flux1/flux1_transformer.h"
#include "models/flux2/flux2_transformer.h"
#include "models/qwenimage/qwenimage_transformer.h"

namespace ditserve::models {
namespace {

using Factory = std::function<absl::StatusOr<std::unique_ptr<DiffusionTransformer>>(
    const nlohmann::json&, const sharding::ShardedStateDict&, comm::Communicator*,
    const TransformerLoadOptions&)>;

// config.json → the model's typed config (`parse`) → Model::Load on this rank's shard.
template <typename Model, typename Parse>
Factory MakeFactory(Parse parse) {
  return [parse](const nlohmann::json& config, const sharding::ShardedStateDict& sd,
                 comm::Communicator* comm, const TransformerLoadOptions& options)
             -> absl::StatusOr<std::unique_ptr<DiffusionTransformer>> {
    ASSIGN_OR_RETURN(auto parsed, parse(config));
    ASSIGN_OR_RETURN(auto model, Model::Load(parsed, sd, comm, options));
    return std::unique_ptr<DiffusionTransformer>(std::move(model));
  };
}

const std::map<std::string, Factory>& Factories() {
  static const auto* factories = new std::map<std::string, Factory>{
      {"FluxTransformer2DModel",
       MakeFactory<flux1::FluxTransformer2DModel>(&flux1::ParseFluxTransformerConfig)},
      {"Flux2Transformer2DModel",
       MakeFactory<flux2::Flux2Transformer2DModel>(&flux2::ParseFlux2TransformerConfig)},
      {"QwenImageTransformer2DModel",
       MakeFactory<qwenimage::QwenImageTransformer2DModel>(&qwenimage::ParseQwenImageTransformerConfig)},
  };
  return *factories;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiffusionTransformer>> CreateTransformer(
    const nlohmann::json& config, const sharding::ShardedStateDict& sd, comm::Communicator* comm,
    const TransformerLoadOptions& options) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("transformer config has no string \"_class_name\"");
  }
  auto cls = config.find("_class_name");
  if (cls == config.end() || cls->is_null()) {
    return absl::InvalidArgumentError("transformer config has no string \"_class_name\"");
  }
  if (!cls->is_string()) return JsonTypeError("transformer config", "_class_name", "a string", *cls);
  const std::string name = cls->get<std::string>();
  auto it = Factories().find(name);
  if (it == Factories().end()) {
    return absl::UnimplementedError(absl::StrCat("unknown transformer class '", name,
                                                 "' (known: ", absl::StrJoin(KnownTransformerClasses(), ", "),
                                                 ")"));
  }
  return it->second(config, sd, comm, options);
}

std::vector<std::string> KnownTransformerClasses() {
  std::vector<std::string> names;
  for (const auto& [name, f] : Factories()) names.push_back(name);
  return names;
}

}  // namespace ditserve::models
