#include "worker/tensor_proto.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/torch_guard.h"

namespace ditserve::worker {

absl::StatusOr<torch::Tensor> TensorFromProto(const ::ditserve::v1::Tensor& proto, const std::string& field) {
  if (proto.dtype() != ::ditserve::v1::DTYPE_FLOAT32 && proto.dtype() != ::ditserve::v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".dtype must be DTYPE_FLOAT32"));
  }
  std::vector<int64_t> shape(proto.shape().begin(), proto.shape().end());
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(field, ".shape has a negative size"));
    numel *= d;
  }
  if (static_cast<uint64_t>(numel) * 4 != proto.data().size()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".data holds ", proto.data().size(),
                                                   " bytes; shape needs ", numel * 4));
  }
  // Runs on RPC handler threads: an allocation failure is a Status, not an exception.
  return GuardTorch("decoding a tensor", [&] {
    torch::Tensor t = torch::empty(shape, torch::kFloat32);
    if (numel > 0) std::memcpy(t.data_ptr(), proto.data().data(), proto.data().size());
    return t;
  });
}

::ditserve::v1::Tensor TensorToProto(const torch::Tensor& tensor) {
  torch::Tensor t = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  ::ditserve::v1::Tensor out;
  for (int64_t d : t.sizes()) out.add_shape(d);
  out.set_dtype(::ditserve::v1::DTYPE_FLOAT32);
  out.set_data(t.data_ptr(), static_cast<size_t>(t.numel()) * 4);
  return out;
}

}  // namespace ditserve::worker
