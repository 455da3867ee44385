#include "common/config_json.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "absl/strings/str_join.h"

namespace ditserve {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool JsonNestingExceeds(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& text) {
  if (JsonNestingExceeds(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config nests deeper than ", kMaxJsonDepth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config is not a JSON object");
  }
  return j;
}

absl::StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseJsonObjectFile(*text, path);
}

absl::StatusOr<nlohmann::json> ParseJsonObjectFile(const std::string& text,
                                                   const std::string& path) {
  if (JsonNestingExceeds(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": nests deeper than ", kMaxJsonDepth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return j;
}

std::string JsonTypePhrase(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number with a fraction";
    case nlohmann::json::value_t::null:
      return "null";
    default:
      return "an unsupported value";
  }
}

absl::Status JsonTypeError(absl::string_view file, absl::string_view field,
                           absl::string_view expected, const nlohmann::json& got) {
  return absl::InvalidArgumentError(absl::StrCat(file, file.empty() ? "" : ": ", "field '", field,
                                                 "' must be ", expected, ", got ",
                                                 JsonTypePhrase(got)));
}

std::string JsonFieldPath(absl::string_view parent, absl::string_view key) {
  if (parent.empty()) return std::string(key);
  return absl::StrCat(parent, ".", key);
}

absl::Status WithFile(const absl::Status& status, absl::string_view file) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(file, ": ", status.message()));
}

absl::Status ReadPositiveInt(const nlohmann::json& j, const char* key, int64_t* out,
                             const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be an integer, got ", JsonTypePhrase(*it)));
  }
  // An unsigned value beyond int64_t is too large, not negative.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(kMaxConfigInt)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be at most ", kMaxConfigInt));
  }
  const int64_t value = it->get<int64_t>();
  if (value <= 0)
    return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be positive"));
  if (value > kMaxConfigInt) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be at most ", kMaxConfigInt));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadPositiveDouble(const nlohmann::json& j, const char* key, double* out,
                                const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be a number, got ", JsonTypePhrase(*it)));
  }
  const double value = it->get<double>();
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be a finite number"));
  }
  if (!(value > 0))
    return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be positive"));
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadBool(const nlohmann::json& j, const char* key, bool* out, const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be a boolean, got ", JsonTypePhrase(*it)));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

namespace {

// The list readers' shared part: absent or null keeps *out; otherwise a non-empty array whose
// entries are all integers passing `ok`, or INVALID_ARGUMENT with `complaint(entry, list)` after
// "<context>: 'key' ".
absl::Status ReadIntList(const nlohmann::json& j, const char* key, std::vector<int64_t>* out,
                         const char* context, const std::function<bool(int64_t)>& ok,
                         const std::function<std::string(const nlohmann::json& entry,
                                                         const nlohmann::json& list)>& complaint) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": '", key, "' must be a non-empty list, got ",
                     it->is_array() ? "an empty one" : JsonTypePhrase(*it)));
  }
  std::vector<int64_t> values;
  for (const auto& v : *it) {
    if (!v.is_number_integer() || !ok(v.get<int64_t>())) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' ", complaint(v, *it)));
    }
    values.push_back(v.get<int64_t>());
  }
  *out = std::move(values);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadPositiveIntList(const nlohmann::json& j, const char* key,
                                 std::vector<int64_t>* out, const char* context) {
  return ReadIntList(
      j, key, out, context, [](int64_t v) { return v > 0; },
      [](const nlohmann::json&, const nlohmann::json& list) {
        return absl::StrCat("must hold positive integers, got ", list.dump());
      });
}

absl::Status ReadPositiveEvenIntList(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t>* out, const char* context) {
  return ReadIntList(
      j, key, out, context, [](int64_t v) { return v > 0 && v % 2 == 0 && v <= kMaxConfigInt; },
      [](const nlohmann::json& v, const nlohmann::json&) {
        return absl::StrCat("entries must be positive even integers up to ", kMaxConfigInt,
                            ", got ", v.is_number() ? v.dump() : JsonTypePhrase(v));
      });
}

absl::Status CheckAxesDimsRopeSum(const std::vector<int64_t>& axes, int64_t attention_head_dim) {
  // Summed in 128 bits: the list may be long and its entries large (config values are only known
  // to be positive here).
  __int128 sum = 0;
  for (int64_t a : axes) sum += a;
  if (sum == attention_head_dim) return absl::OkStatus();
  const std::string width = sum > std::numeric_limits<int64_t>::max()
                                ? std::string("more than 2^63")
                                : absl::StrCat(static_cast<int64_t>(sum));
  return absl::InvalidArgumentError(absl::StrCat("transformer config: axes_dims_rope [",
                                                 absl::StrJoin(axes, ", "), "] sums to ", width,
                                                 ", not attention_head_dim ", attention_head_dim));
}

}  // namespace ditserve
