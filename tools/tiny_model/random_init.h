// Values for a TensorSpec: deterministic pseudo-random normals, ones or zeros, as float32 or
// bfloat16 bytes. Torch-free.
//
// Each tensor's stream is seeded from (seed, tensor name) alone, so a tensor's values do not depend
// on which other tensors exist or in which order they are generated, and the same seed gives the
// same bytes on every run and platform (SplitMix64 + Box-Muller in double precision; no <random>
// distributions, whose output is implementation-defined).
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharding/safetensors.h"
#include "tools/tiny_model/tensor_spec.h"

namespace ditserve::tiny_model {

// The same values as raw little-endian bytes of `dtype` (kF32, or kBF16 rounded to nearest even).
// INVALID_ARGUMENT for any other dtype.
absl::StatusOr<std::vector<uint8_t>> InitialBytes(const TensorSpec& spec, uint64_t seed,
                                                  sharding::DType dtype);

}  // namespace ditserve::tiny_model
