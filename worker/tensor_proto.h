// Conversion between ditserve.v1.Tensor (float32, row-major, little-endian) and torch tensors.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::worker {

// A CPU float32 tensor holding a copy of the proto's data. INVALID_ARGUMENT naming `field` when the
// byte count does not match the shape or the dtype is not FLOAT32; torch errors (no memory) come
// back as Status (GuardTorch).
absl::StatusOr<torch::Tensor> TensorFromProto(const ::ditserve::v1::Tensor& proto, const std::string& field);

// Any tensor, converted to float32 on the CPU. Throws what LibTorch throws: callers on RPC handler
// threads call it inside GuardTorch (worker/job_codec.cc does).
::ditserve::v1::Tensor TensorToProto(const torch::Tensor& tensor);

}  // namespace ditserve::worker
