#include "tools/tiny_model/config_fields.h"

#include "absl/strings/str_cat.h"

namespace ditserve::tiny_model {
namespace {

absl::Status Bad(const std::string& component, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(component, " config: \"", key, "\" ", what));
}

bool Missing(const nlohmann::json& config, const std::string& key) {
  return !config.is_object() || !config.contains(key) || config[key].is_null();
}

}  // namespace

absl::StatusOr<int64_t> PositiveInt(const nlohmann::json& config, const std::string& component,
                                    const std::string& key, std::optional<int64_t> fallback) {
  if (Missing(config, key)) {
    if (fallback) return *fallback;
    return Bad(component, key, "is required");
  }
  const nlohmann::json& v = config[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return Bad(component, key, absl::StrCat("must be a positive integer, got ", v.dump()));
  }
  return v.get<int64_t>();
}

absl::StatusOr<bool> Bool(const nlohmann::json& config, const std::string& component,
                          const std::string& key, bool fallback) {
  if (Missing(config, key)) return fallback;
  if (!config[key].is_boolean()) {
    return Bad(component, key, absl::StrCat("must be true or false, got ", config[key].dump()));
  }
  return config[key].get<bool>();
}

absl::StatusOr<std::string> String(const nlohmann::json& config, const std::string& component,
                                   const std::string& key, const std::string& fallback) {
  if (Missing(config, key)) return fallback;
  if (!config[key].is_string()) {
    return Bad(component, key, absl::StrCat("must be a string, got ", config[key].dump()));
  }
  return config[key].get<std::string>();
}

absl::StatusOr<std::vector<int64_t>> PositiveIntList(const nlohmann::json& config,
                                                     const std::string& component,
                                                     const std::string& key) {
  if (Missing(config, key)) return Bad(component, key, "is required");
  const nlohmann::json& v = config[key];
  if (!v.is_array() || v.empty()) return Bad(component, key, "must be a non-empty list");
  std::vector<int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() <= 0) {
      return Bad(component, key, absl::StrCat("must hold positive integers, got ", v.dump()));
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> StringList(const nlohmann::json& config,
                                                    const std::string& component,
                                                    const std::string& key) {
  if (Missing(config, key)) return Bad(component, key, "is required");
  const nlohmann::json& v = config[key];
  if (!v.is_array()) return Bad(component, key, "must be a list of strings");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) return Bad(component, key, "must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace ditserve::tiny_model
