// Values of the model-loading options that three binaries check: the frontend at start (its flags),
// the worker again on InitRequest (any client may send one), and `ditserve-tool plan` (its own
// --weights). One definition, so that the three accept and refuse the same values with the same
// message. Torch-free. Thread-safety: pure functions and constants.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ditserve {

// The storage of a model's block linears (--weights): the model dtype, or FP8 e4m3 with
// per-output-channel scales (models/common/fp8_linear.h).
enum class WeightFormat { kModelDtype, kFp8 };

// "dtype" | "fp8"; INVALID_ARGUMENT naming the flag and both values otherwise.
absl::StatusOr<WeightFormat> ParseWeightFormat(const std::string& name);
const char* WeightFormatName(WeightFormat f);

// --cuda-graphs N: CUDA graphs kept per worker, 0 (off) to this (models/common/step_graphs.h).
inline constexpr uint32_t kMaxCudaGraphs = 64;

}  // namespace ditserve
