#include "metrics/registry.h"

#include "absl/strings/str_cat.h"
#include "metrics/histogram.h"
#include "metrics/metric_names.h"

namespace ditserve::metrics {
namespace {

std::vector<std::string> SampleNames(const FamilySpec& spec) {
  if (spec.type != MetricType::kHistogram) return {spec.name};
  return {spec.name, spec.name + "_bucket", spec.name + "_sum", spec.name + "_count"};
}

}  // namespace

absl::Status Registry::CheckAndReserveLocked(const FamilySpec& spec) {
  absl::Status s = ValidateMetricName(spec.name);
  if (!s.ok()) return s;
  if (spec.help.empty()) {
    // promtool flags a family without HELP ("no help text"); require it up front.
    return absl::InvalidArgumentError(absl::StrCat("metric ", spec.name, ": help text is empty"));
  }
  s = ValidateLabels(spec.constant_labels, spec.type);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("metric ", spec.name, ": ", s.message()));
  if (spec.type == MetricType::kHistogram) {
    s = ValidateBucketBounds(spec.buckets);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metric ", spec.name, ": ", s.message()));
    }
  }
  const std::vector<std::string> names = SampleNames(spec);
  for (const std::string& n : names) {
    if (sample_names_.count(n) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "metric ", spec.name, ": the name \"", n, "\" is already used by a registered family"));
    }
  }
  sample_names_.insert(names.begin(), names.end());
  return absl::OkStatus();
}

void Registry::AddCollectHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<MetricFamilySnapshot> Registry::Collect() {
  {
    std::lock_guard<std::mutex> run_lock(hooks_run_mu_);
    std::vector<std::function<void()>> hooks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hooks = hooks_;
    }
    // Run without mu_ so a hook may register families or add children.
    for (const auto& hook : hooks) hook();
  }
  std::vector<const FamilyBase*> families;
  {
    std::lock_guard<std::mutex> lock(mu_);
    families.reserve(families_.size());
    for (const auto& f : families_) families.push_back(f.get());
  }
  std::vector<MetricFamilySnapshot> out;
  out.reserve(families.size());
  for (const FamilyBase* f : families) out.push_back(f->Collect());
  return out;
}

}  // namespace ditserve::metrics
