// Counter: a monotonically increasing value (Prometheus "counter"). Lock-free; any thread may call
// any method at any time. Owned by its Family; the pointer stays valid until Family::Remove of its
// label set or the Registry's destruction.
#pragma once

#include <atomic>

#include "metrics/snapshot.h"

namespace ditserve::metrics {

class Counter {
 public:
  static constexpr MetricType kType = MetricType::kCounter;

  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `amount`. Negative or NaN amounts are ignored (a counter never goes down).
  void Increment(double amount = 1.0);

  // Mirrors a cumulative total kept elsewhere (another process's counter, /proc CPU time): the
  // value becomes `total`. Use only for such totals; a smaller total than before means the source
  // restarted, which Prometheus' rate() treats as a counter reset. NaN is ignored.
  void SetCumulative(double total);

  double Value() const { return value_.load(std::memory_order_relaxed); }

  void Snapshot(MetricSnapshot& out) const { out.value = Value(); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace ditserve::metrics
