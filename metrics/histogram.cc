#include "metrics/histogram.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ditserve::metrics {

absl::Status ValidateBucketBounds(const std::vector<double>& upper_bounds) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram bucket bound #", i, " is not finite (", upper_bounds[i],
                       "); the +Inf bucket is added automatically"));
    }
    if (i > 0 && !(upper_bounds[i] > upper_bounds[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram bucket bounds must be strictly increasing: bound #", i, " (",
                       upper_bounds[i], ") <= bound #", i - 1, " (", upper_bounds[i - 1], ")"));
    }
  }
  return absl::OkStatus();
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // lower_bound: first bound >= value, i.e. value <= le. NaN compares false everywhere -> +Inf.
  size_t index = upper_bounds_.size();
  if (!std::isnan(value)) {
    index = static_cast<size_t>(
        std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
        upper_bounds_.begin());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++bucket_counts_[index];
  sum_ += value;
}

void Histogram::Snapshot(MetricSnapshot& out) const {
  HistogramSnapshot& h = out.histogram;
  h.upper_bounds = upper_bounds_;
  h.cumulative_counts.resize(bucket_counts_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t running = 0;
    for (size_t i = 0; i < bucket_counts_.size(); ++i) {
      running += bucket_counts_[i];
      h.cumulative_counts[i] = running;
    }
    h.sum = sum_;
  }
  h.count = h.cumulative_counts.back();
}

}  // namespace ditserve::metrics
