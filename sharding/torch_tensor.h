// Conversion of safetensors data into LibTorch tensors.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "sharding/safetensors.h"

namespace ditserve::sharding {

// The torch dtype of a safetensors dtype, or UNIMPLEMENTED (e.g. F8 on LibTorch 1.13).
absl::StatusOr<torch::ScalarType> TorchDType(DType dtype);
// The safetensors dtype of a torch dtype, or INVALID_ARGUMENT for one safetensors cannot hold.
absl::StatusOr<DType> SafetensorsDType(torch::ScalarType type);

// Copies one whole tensor out of the file into a new CPU tensor of its own dtype.
absl::StatusOr<torch::Tensor> ReadWholeTensor(const SafetensorsFile& file, const TensorInfo& info);

// Every tensor of one file, by name (own dtype, CPU). For small files: tests, reference data.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadAllTensors(const std::string& path);

}  // namespace ditserve::sharding
