// Small load/argument-check helpers shared by the transformer models (header-only).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/common/linear_layer.h"

namespace ditserve::models {

// "(1, 64, 16)", or "(none)" for an undefined tensor.
inline std::string ShapeString(const torch::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + ")";
}

// INVALID_ARGUMENT unless `layer` maps `in` to `out` features on this rank (for layers every plan
// keeps replicated: embedders, final projections).
inline absl::Status CheckLinearWidths(const LinearLayer& layer, const std::string& path, int64_t in,
                                      int64_t out) {
  if (layer.in_features() != in || layer.out_features() != out) {
    return absl::InvalidArgumentError(absl::StrCat(path, " maps ", layer.in_features(), " → ",
                                                   layer.out_features(), " features on this rank; ",
                                                   "the config needs ", in, " → ", out));
  }
  return absl::OkStatus();
}

}  // namespace ditserve::models
