#include "sharding/model_json.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config_json.h"

namespace ditserve::sharding {

absl::StatusOr<PipelineIndex> ParsePipelineIndex(const nlohmann::json& j, const std::string& root,
                                                 const std::string& path) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  PipelineIndex index;
  index.root = root;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "_class_name") {
      if (it.value().is_null()) continue;  // then "missing" below
      if (!it.value().is_string()) return JsonTypeError(path, key, "a string", it.value());
      index.class_name = it.value().get<std::string>();
      continue;
    }
    if (!key.empty() && key[0] == '_') continue;  // _diffusers_version, _name_or_path, ...
    const auto& v = it.value();
    // Components are [library, class]; other keys are pipeline options (e.g. booleans).
    if (!v.is_array()) continue;
    if (v.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": component '", key, "' must be [library, class]"));
    }
    if (v[0].is_null() && v[1].is_null()) continue;
    if (key.empty()) {
      // A component is the folder of its name: "" would be the pipeline folder itself.
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a component [library, class] under an empty name"));
    }
    for (size_t i = 0; i < 2; ++i) {
      if (!v[i].is_string()) {
        return JsonTypeError(path, absl::StrCat(key, "[", i, "]"),
                             absl::StrCat("a string (the ", i == 0 ? "library" : "class",
                                          " of [library, class])"),
                             v[i]);
      }
    }
    index.components.push_back({key, v[0].get<std::string>(), v[1].get<std::string>()});
  }
  if (index.class_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing '_class_name'"));
  }
  return index;
}

absl::Status CheckComponentConfig(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  if (auto cls = config.find("_class_name"); cls != config.end() && !cls->is_null() &&
                                              !cls->is_string()) {
    return JsonTypeError(path, "_class_name", "a string", *cls);
  }
  auto q = config.find("quantization_config");
  if (q != config.end() && !q->is_null()) {
    std::string method;
    if (q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()) {
      method = absl::StrCat(" (quant_method '", (*q)["quant_method"].get<std::string>(), "')");
    }
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": has a quantization_config", method,
                     "; quantized checkpoints are not supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> ParseWeightMap(const nlohmann::json& index,
                                                                  const std::string& path) {
  auto wm = index.find("weight_map");
  if (wm == index.end() || wm->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing object 'weight_map'"));
  }
  if (!wm->is_object()) return JsonTypeError(path, "weight_map", "an object", *wm);
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return JsonTypeError(path, JsonFieldPath("weight_map", it.key()), "a string (a shard file name)",
                           it.value());
    }
    const std::string shard = it.value().get<std::string>();
    // Shards live next to the index: refuse anything that would reach elsewhere.
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": weight_map entry for tensor '",
                                                     it.key(), "' names '", shard,
                                                     "', which is not a plain file name"));
    }
    if (!absl::EndsWith(shard, ".safetensors")) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": weight_map entry for tensor '", it.key(), "' names '", shard,
          "', which is not a safetensors file (pickle weights are refused)"));
    }
    out[it.key()] = shard;
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": weight_map is empty"));
  }
  return out;
}

}  // namespace ditserve::sharding
