#include "common/config_json.h"

#include <fstream>
#include <sstream>

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

}  // namespace ditserve
