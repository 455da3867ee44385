// Test support: wall-clock timing of a repeated fallible call, for the "[timing]" lines that model
// tests print next to their parity checks.
#pragma once

#include <chrono>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ditserve::testing {

// Mean milliseconds per call over `runs` calls of `fn`; the first error `fn` returns stops the
// loop and is returned instead.
inline absl::StatusOr<double> MeanMillis(int runs, const std::function<absl::Status()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) {
    if (absl::Status status = fn(); !status.ok()) return status;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         runs;
}

}  // namespace ditserve::testing
