// Histogram: counts observations into fixed buckets (Prometheus "histogram"). Thread-safe: Observe
// and Snapshot take a short per-histogram mutex, so every snapshot is consistent (the +Inf bucket
// always equals _count and _sum matches the same observations). Observations happen at most a few
// times per denoising step, so the lock is never contended in practice.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "metrics/snapshot.h"

namespace ditserve::metrics {

// Bucket upper bounds must be finite and strictly increasing (may be empty: then only +Inf).
absl::Status ValidateBucketBounds(const std::vector<double>& upper_bounds);

class Histogram {
 public:
  static constexpr MetricType kType = MetricType::kHistogram;

  // `upper_bounds` must satisfy ValidateBucketBounds (Family checks it at registration).
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value (Prometheus' "le" semantics). NaN
  // is counted in +Inf only and poisons _sum, as in the reference client libraries.
  void Observe(double value);

  void Snapshot(MetricSnapshot& out) const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> bucket_counts_;  // per bucket (not cumulative); last = (bound_max, +Inf]
  double sum_ = 0;
};

}  // namespace ditserve::metrics
