// Python's round() on a float (round half to even), as the size formulas of diffusers and
// transformers use it (smart_resize, calculate_dimensions). Torch-free, header-only.
#pragma once

#include <cmath>

namespace ditserve::imaging {

// The nearest integer to x, ties to the even one. x - floor(x) is exact for doubles.
inline double RoundHalfEven(double x) {
  const double f = std::floor(x);
  const double d = x - f;
  if (d > 0.5) return f + 1.0;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

}  // namespace ditserve::imaging
