// The --dtype flag of the ditserve-tool subcommands: one spelling table for all of them
// ("float32" / "f32", "bfloat16" / "bf16", "float16" / "f16"; the long names of the two serving
// dtypes are common/model_flags.h's), each subcommand naming the dtypes it supports. Pure function;
// thread-safe.
#pragma once

#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "sharding/safetensors.h"

namespace ditserve::tools {

// The dtype `value` names, if it is one of `allowed` (kF32, kBF16, kF16); otherwise
// INVALID_ARGUMENT "--dtype must be float32 or bfloat16, got 'x'" listing the allowed ones.
absl::StatusOr<sharding::DType> ParseDTypeFlag(const std::string& value,
                                               std::initializer_list<sharding::DType> allowed);

}  // namespace ditserve::tools
