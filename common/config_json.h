// Reading a Hugging Face config.json (transformers, text encoders, VAE): the file's text, and typed
// field access with defaults and errors that name the key. Used by the config parsers' .cc files
// (nlohmann stays out of the public model headers).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ditserve {

absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Config files are JSON documents a few levels deep. Deeper nesting is refused before parsing:
// nlohmann's parser is iterative, but dump(), copies and comparisons of a value recurse once per
// level, so a hostile file of a million '[' would overflow the stack of whoever touches it.
inline constexpr int kMaxJsonDepth = 64;
// True when `text` nests arrays / objects deeper than `max_depth` (brackets inside strings do not
// count). Linear, no allocation; meant to run before nlohmann::json::parse on untrusted text.
bool JsonNestingExceeds(const std::string& text, int max_depth = kMaxJsonDepth);

// INVALID_ARGUMENT when `text` is not valid JSON, nests deeper than kMaxJsonDepth or is not an
// object.
absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& text);
// The JSON object in the file at `path`: NOT_FOUND when it cannot be read, INVALID_ARGUMENT naming
// the path when it is not valid JSON, nests deeper than kMaxJsonDepth or is not an object.
absl::StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path);
// What ReadJsonObjectFile does with the file's text: the same checks and messages, `path` naming
// the file (messages only; nothing is read). The in-memory entry point (the config fuzzer).
absl::StatusOr<nlohmann::json> ParseJsonObjectFile(const std::string& text,
                                                   const std::string& path);

namespace config_json_internal {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// `v` as T without nlohmann's unchecked conversions (a float outside an integer type's range is
// undefined behaviour in get<>(), 2.5 silently becomes 2): integers must be integral numbers in
// T's range, floating-point values finite numbers, strings strings, booleans booleans, vectors
// arrays of such. On failure, *expected says what was wanted.
template <typename T>
bool JsonValueAs(const nlohmann::json& v, T* out, std::string* expected) {
  if constexpr (std::is_same_v<T, bool>) {
    *expected = "a boolean";
    if (!v.is_boolean()) return false;
    *out = v.get<bool>();
    return true;
  } else if constexpr (std::is_integral_v<T>) {
    *expected = absl::StrCat("an integer in ", std::numeric_limits<T>::min(), "..",
                             std::numeric_limits<T>::max());
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
      *out = static_cast<T>(u);
      return true;
    }
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if constexpr (std::is_signed_v<T>) {
        if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            i > static_cast<int64_t>(std::numeric_limits<T>::max())) {
          return false;
        }
      } else {
        if (i < 0 || static_cast<uint64_t>(i) > std::numeric_limits<T>::max()) return false;
      }
      *out = static_cast<T>(i);
      return true;
    }
    if (v.is_number_float()) {  // 64.0 is accepted as 64; 2.5 and 1e300 are not
      const double d = v.get<double>();
      // Both bounds are exact powers of two as doubles; the range check precedes the cast.
      const double lo = static_cast<double>(std::numeric_limits<T>::min());
      const double hi = std::ldexp(1.0, std::numeric_limits<T>::digits);
      if (!(d >= lo && d < hi) || std::trunc(d) != d) return false;
      *out = static_cast<T>(d);
      return true;
    }
    return false;
  } else if constexpr (std::is_floating_point_v<T>) {
    *expected = "a finite number";
    if (!v.is_number()) return false;
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max())) {
      return false;
    }
    *out = static_cast<T>(d);
    return true;
  } else if constexpr (std::is_same_v<T, std::string>) {
    *expected = "a string";
    if (!v.is_string()) return false;
    *out = v.get<std::string>();
    return true;
  } else if constexpr (IsVector<T>::value) {
    if (!v.is_array()) {
      typename T::value_type probe{};
      JsonValueAs(nlohmann::json(), &probe, expected);
      *expected = absl::StrCat("a list of ", *expected);
      return false;
    }
    T values;
    values.reserve(v.size());
    for (const auto& element : v) {
      typename T::value_type value{};
      if (!JsonValueAs(element, &value, expected)) {
        *expected = absl::StrCat("a list of ", *expected);
        return false;
      }
      values.push_back(std::move(value));
    }
    *out = std::move(values);
    return true;
  } else {
    static_assert(!sizeof(T), "JsonField: unsupported type");
  }
}

}  // namespace config_json_internal

// What a JSON value is, for messages: "an object", "an array", "a string", "a boolean",
// "an integer", "a number with a fraction", "null".
std::string JsonTypePhrase(const nlohmann::json& v);

// INVALID_ARGUMENT "<file>: field '<field>' must be <expected>, got <JsonTypePhrase(got)>" (no
// "<file>: " when `file` is empty). `field` is the dotted path from the document's root
// ("text_config.model_type", "model.vocab[\"a\"]").
absl::Status JsonTypeError(absl::string_view file, absl::string_view field,
                           absl::string_view expected, const nlohmann::json& got);

// "<parent>.<key>", or `key` when `parent` is empty: the dotted field paths of messages.
std::string JsonFieldPath(absl::string_view parent, absl::string_view key);

// `status` with "<file>: " before its message, same code; OK stays OK. For the callers of the
// parsers that take a JSON object and so cannot name the file themselves.
absl::Status WithFile(const absl::Status& status, absl::string_view file);

// j[key] as T, or `fallback` when absent or null; INVALID_ARGUMENT "config field 'key': expected
// <what>, got <JSON type phrase>" when the value does not convert exactly (see JsonValueAs). The
// Load* wrappers put the file in front.
template <typename T>
absl::StatusOr<T> JsonField(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  T value{};
  std::string expected;
  if (!config_json_internal::JsonValueAs(*it, &value, &expected)) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", key, "': expected ", expected,
                                                   ", got ", JsonTypePhrase(*it)));
  }
  return value;
}

// The path-naming variant: j[key] as T (checked as JsonField does), or `fallback` when absent or
// null; otherwise JsonTypeError(file, JsonFieldPath(parent, key), ...). `j` that is not an object
// has no fields: `fallback`.
template <typename T>
absl::StatusOr<T> JsonFieldAt(const nlohmann::json& j, const char* key, T fallback,
                              absl::string_view file, absl::string_view parent = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  T value{};
  std::string expected;
  if (!config_json_internal::JsonValueAs(*it, &value, &expected)) {
    return JsonTypeError(file, JsonFieldPath(parent, key), expected, *it);
  }
  return value;
}

// The largest integer ReadPositiveInt accepts: no model dimension comes near it, and the product
// of two such values still fits int64_t (what the config parsers compute, e.g. heads x head dim).
inline constexpr int64_t kMaxConfigInt = 2147483647;

// Optional positive numbers (absent or null: *out keeps its default): INVALID_ARGUMENT
// "<context>: 'key' must be an integer / a finite number / positive / at most kMaxConfigInt".
absl::Status ReadPositiveInt(const nlohmann::json& j, const char* key, int64_t* out,
                             const char* context = "transformer config");
absl::Status ReadPositiveDouble(const nlohmann::json& j, const char* key, double* out,
                                const char* context = "transformer config");

// Optional boolean (absent or null: *out keeps its default).
absl::Status ReadBool(const nlohmann::json& j, const char* key, bool* out,
                      const char* context = "transformer config");
// Optional non-empty list of positive integers (absent or null: *out keeps its default; the VAE
// configs' channel lists): INVALID_ARGUMENT "<context>: 'key' must be a non-empty list, got ..." /
// "must hold positive integers, got <the list>".
absl::Status ReadPositiveIntList(const nlohmann::json& j, const char* key,
                                 std::vector<int64_t>* out, const char* context);
// Optional non-empty list of positive even integers, each at most kMaxConfigInt (RoPE axis widths).
absl::Status ReadPositiveEvenIntList(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t>* out,
                                     const char* context = "transformer config");
// RoPE axis widths must add up to the attention head dim.
absl::Status CheckAxesDimsRopeSum(const std::vector<int64_t>& axes, int64_t attention_head_dim);

}  // namespace ditserve
