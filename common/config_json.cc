#include "common/config_json.h"

#include <fstream>
#include <numeric>
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

absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config is not a JSON object");
  }
  return j;
}

absl::StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return j;
}

absl::Status ReadPositiveInt(const nlohmann::json& j, const char* key, int64_t* out,
                             const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be an integer"));
  }
  *out = it->get<int64_t>();
  if (*out <= 0) return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be positive"));
  return absl::OkStatus();
}

absl::Status ReadPositiveDouble(const nlohmann::json& j, const char* key, double* out,
                                const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be a number"));
  }
  *out = it->get<double>();
  if (!(*out > 0)) return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be positive"));
  return absl::OkStatus();
}

absl::Status ReadBool(const nlohmann::json& j, const char* key, bool* out, const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be a boolean"));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadPositiveEvenIntList(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t>* out, const char* context) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": '", key, "' must be a non-empty list"));
  }
  std::vector<int64_t> values;
  for (const auto& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": '", key, "' entries must be positive even integers"));
    }
    values.push_back(v.get<int64_t>());
  }
  *out = std::move(values);
  return absl::OkStatus();
}

absl::Status CheckAxesDimsRopeSum(const std::vector<int64_t>& axes, int64_t attention_head_dim) {
  const int64_t width = std::accumulate(axes.begin(), axes.end(), int64_t{0});
  if (width == attention_head_dim) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("transformer config: axes_dims_rope [",
                                                 absl::StrJoin(axes, ", "), "] sums to ", width,
                                                 ", not attention_head_dim ", attention_head_dim));
}

}  // namespace ditserve
