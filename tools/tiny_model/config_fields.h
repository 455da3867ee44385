// Typed reads of the component config.json fields the weight generators need, with errors that
// name the component and the field. Torch-free.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace ditserve::tiny_model {

// A positive integer field; `fallback` (the class's default) when the field is absent or null, or
// INVALID_ARGUMENT when there is none.
absl::StatusOr<int64_t> PositiveInt(const nlohmann::json& config, const std::string& component,
                                    const std::string& key,
                                    std::optional<int64_t> fallback = std::nullopt);
absl::StatusOr<bool> Bool(const nlohmann::json& config, const std::string& component,
                          const std::string& key, bool fallback);
absl::StatusOr<std::string> String(const nlohmann::json& config, const std::string& component,
                                   const std::string& key, const std::string& fallback);
// A non-empty list of positive integers (no default).
absl::StatusOr<std::vector<int64_t>> PositiveIntList(const nlohmann::json& config,
                                                     const std::string& component,
                                                     const std::string& key);
// A list of strings (no default).
absl::StatusOr<std::vector<std::string>> StringList(const nlohmann::json& config,
                                                    const std::string& component,
                                                    const std::string& key);

}  // namespace ditserve::tiny_model
