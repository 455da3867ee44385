#include "metrics/gauge.h"

#include <chrono>

namespace ditserve::metrics {

void Gauge::Increment(double amount) {
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

void Gauge::SetToCurrentTime() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  Set(std::chrono::duration<double>(now).count());
}

}  // namespace ditserve::metrics
