// What a generated checkpoint tensor is before it has values: name, shape and how to initialise
// it, plus builders for the layer kinds the FLUX.1 components are made of. Torch-free.
//
// Initialisation (random_init.h) is chosen so that a forward pass of the random model keeps
// activations of order one: weights of linear and convolution layers ~ N(0, 1/fan_in), biases 0,
// normalisation weights 1 and biases 0, embeddings N(0, std) with the std the caller gives.
//
// Thread-safety: plain values; TensorList is not synchronised.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditserve::tiny_model {

enum class TensorInit { kNormal, kOnes, kZeros };

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorInit init = TensorInit::kNormal;
  float stddev = 0.0f;  // kNormal only
};

// Appends specs with diffusers / transformers parameter names ("<prefix>.weight", "<prefix>.bias").
class TensorList {
 public:
  // Linear in -> out: weight [out, in] ~ N(0, 1/in), bias [out] = 0 when `bias`.
  void Linear(const std::string& prefix, int64_t out, int64_t in, bool bias = true);
  // Normalisation layer over `dim` (LayerNorm, GroupNorm, RMSNorm): weight 1, bias 0 when `bias`.
  void Norm(const std::string& prefix, int64_t dim, bool bias = true);
  // Conv2d in -> out with a k x k kernel: weight [out, in, k, k] ~ N(0, 1/(in k k)), bias [out] = 0.
  void Conv(const std::string& prefix, int64_t out, int64_t in, int64_t k);
  // An embedding table (no suffix added to `name`): [rows, dim] ~ N(0, stddev^2).
  void Embedding(const std::string& name, int64_t rows, int64_t dim, float stddev);

  const std::vector<TensorSpec>& specs() const { return specs_; }
  std::vector<TensorSpec> Release() { return std::move(specs_); }

 private:
  std::vector<TensorSpec> specs_;
};

}  // namespace ditserve::tiny_model
