#include "metrics/metric_names.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ditserve::metrics {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Index of the first invalid character, or npos.
size_t FirstInvalid(absl::string_view name) {
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 0 ? !IsNameStart(name[i]) : !IsNameChar(name[i])) return i;
  }
  return absl::string_view::npos;
}

}  // namespace

absl::Status ValidateMetricName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("metric name is empty");
  const size_t bad = FirstInvalid(name);
  if (bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid metric name \"", name, "\": character ", bad,
        " ('", name.substr(bad, 1), "') is not allowed; names must match [a-zA-Z_][a-zA-Z0-9_]*",
        name[bad] == ':' ? " (':' is reserved for recording rules)" : ""));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelName(absl::string_view name, MetricType family_type) {
  if (name.empty()) return absl::InvalidArgumentError("label name is empty");
  const size_t bad = FirstInvalid(name);
  if (bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid label name \"", name, "\": character ", bad, " ('", name.substr(bad, 1),
        "') is not allowed; label names must match [a-zA-Z_][a-zA-Z0-9_]*"));
  }
  if (absl::StartsWith(name, "__")) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid label name \"", name, "\": names starting with \"__\" are reserved"));
  }
  if (family_type == MetricType::kHistogram && name == "le") {
    return absl::InvalidArgumentError(
        "invalid label name \"le\": reserved for histogram bucket bounds");
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const Labels& labels, MetricType family_type) {
  for (const auto& [name, value] : labels) {
    absl::Status s = ValidateLabelName(name, family_type);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ditserve::metrics
