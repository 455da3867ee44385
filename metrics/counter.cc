#include "metrics/counter.h"

#include <cmath>

namespace ditserve::metrics {

void Counter::Increment(double amount) {
  if (!(amount >= 0)) return;  // also rejects NaN
  // std::atomic<double>::fetch_add is C++20; a CAS loop gives the same exact-total guarantee.
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

void Counter::SetCumulative(double total) {
  if (std::isnan(total)) return;
  value_.store(total, std::memory_order_relaxed);
}

}  // namespace ditserve::metrics
