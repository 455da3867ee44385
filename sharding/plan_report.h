// What every rank of a tensor-parallel group would load from a component: the JSON printed by
// `ditserve-tool plan`. Torch-free; reads headers only.
#pragma once

#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "sharding/checkpoint.h"
#include "sharding/tp_plan.h"

namespace ditserve::sharding {

// Validates `plan` (null: all replicated) for `tp_degree` and describes, for every tensor: name,
// stored dtype, module, style, split dim, global shape, shape and bytes on each rank; then the
// total bytes per rank. Byte counts use `float_dtype` for floating tensors when given (the dtype
// the loader would convert to), else the stored dtype. Returns the validation error on failure.
// `select` (optional) keeps only the tensors a loader reads (a text encoder's text model).
absl::StatusOr<nlohmann::ordered_json> DescribeShardPlan(
    const ComponentCheckpoint& ckpt, const TpPlan* plan, int tp_degree,
    std::optional<DType> float_dtype,
    const std::function<bool(const std::string&)>& select = nullptr);

// True for F64 / F32 / F16 / BF16 / F8 (the dtypes the loader converts).
bool IsFloatingDType(DType dtype);

}  // namespace ditserve::sharding
