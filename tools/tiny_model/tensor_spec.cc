#include "tools/tiny_model/tensor_spec.h"

#include <cmath>

namespace ditserve::tiny_model {

void TensorList::Linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
  specs_.push_back({prefix + ".weight", {out, in}, TensorInit::kNormal,
                    static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)))});
  if (bias) specs_.push_back({prefix + ".bias", {out}, TensorInit::kZeros, 0.0f});
}

void TensorList::Norm(const std::string& prefix, int64_t dim, bool bias) {
  specs_.push_back({prefix + ".weight", {dim}, TensorInit::kOnes, 0.0f});
  if (bias) specs_.push_back({prefix + ".bias", {dim}, TensorInit::kZeros, 0.0f});
}

void TensorList::Conv(const std::string& prefix, int64_t out, int64_t in, int64_t k) {
  specs_.push_back({prefix + ".weight", {out, in, k, k}, TensorInit::kNormal,
                    static_cast<float>(1.0 / std::sqrt(static_cast<double>(in * k * k)))});
  specs_.push_back({prefix + ".bias", {out}, TensorInit::kZeros, 0.0f});
}

void TensorList::Embedding(const std::string& name, int64_t rows, int64_t dim, float stddev) {
  specs_.push_back({name, {rows, dim}, TensorInit::kNormal, stddev});
}

}  // namespace ditserve::tiny_model
