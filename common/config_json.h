// Reading a Hugging Face config.json (transformers, text encoders, VAE): the file's text, and typed
// field access with defaults and errors that name the key. Used by the config parsers' .cc files
// (nlohmann stays out of the public model headers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ditserve {

absl::StatusOr<std::string> ReadTextFile(const std::string& path);
absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& text);
// The JSON object in the file at `path`: NOT_FOUND when it cannot be read, INVALID_ARGUMENT naming
// the path when it is not valid JSON or not an object.
absl::StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path);

// j[key] as T, or `fallback` when absent or null; INVALID_ARGUMENT naming the key on a type error.
template <typename T>
absl::StatusOr<T> JsonField(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", key, "': ", e.what()));
  }
}

// Optional positive numbers (absent or null: *out keeps its default): INVALID_ARGUMENT
// "<context>: 'key' must be an integer / a number / positive".
absl::Status ReadPositiveInt(const nlohmann::json& j, const char* key, int64_t* out,
                             const char* context = "transformer config");
absl::Status ReadPositiveDouble(const nlohmann::json& j, const char* key, double* out,
                                const char* context = "transformer config");

// Optional boolean (absent or null: *out keeps its default).
absl::Status ReadBool(const nlohmann::json& j, const char* key, bool* out,
                      const char* context = "transformer config");
// Optional non-empty list of positive even integers (RoPE axis widths).
absl::Status ReadPositiveEvenIntList(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t>* out,
                                     const char* context = "transformer config");
// RoPE axis widths must add up to the attention head dim.
absl::Status CheckAxesDimsRopeSum(const std::vector<int64_t>& axes, int64_t attention_head_dim);

}  // namespace ditserve
