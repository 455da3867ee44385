// Gauge: a value that goes up and down (Prometheus "gauge"). Lock-free; any thread may call any
// method at any time. Owned by its Family; the pointer stays valid until Family::Remove of its
// label set or the Registry's destruction.
#pragma once

#include <atomic>

#include "metrics/snapshot.h"

namespace ditserve::metrics {

class Gauge {
 public:
  static constexpr MetricType kType = MetricType::kGauge;

  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double amount = 1.0);
  void Decrement(double amount = 1.0) { Increment(-amount); }
  // Seconds since the Unix epoch (for *_timestamp_seconds gauges).
  void SetToCurrentTime();

  double Value() const { return value_.load(std::memory_order_relaxed); }

  void Snapshot(MetricSnapshot& out) const { out.value = Value(); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace ditserve::metrics
