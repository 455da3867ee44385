#include "metrics/family.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "metrics/metric_names.h"

namespace ditserve::metrics {

size_t FamilyBase::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_children_;
}

absl::Status FamilyBase::CheckNewChildLabelsLocked(const Labels& labels) {
  for (const auto& [name, value] : labels) {
    absl::Status s = ValidateLabelName(name, spec_.type);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metric ", spec_.name, ": ", s.message()));
    }
    if (spec_.constant_labels.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metric ", spec_.name, ": label \"", name, "\" is already a constant label"));
    }
  }
  std::vector<std::string> names;
  names.reserve(labels.size());
  for (const auto& [name, value] : labels) names.push_back(name);
  if (!label_names_.has_value()) {
    label_names_ = std::move(names);
  } else if (*label_names_ != names) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metric ", spec_.name, ": label names {", absl::StrJoin(names, ","),
        "} differ from this family's {", absl::StrJoin(*label_names_, ","), "}"));
  }
  return absl::OkStatus();
}

Labels FamilyBase::MergedLabels(const Labels& labels) const {
  if (spec_.constant_labels.empty()) return labels;
  Labels merged = spec_.constant_labels;
  merged.insert(labels.begin(), labels.end());
  return merged;
}

}  // namespace ditserve::metrics
