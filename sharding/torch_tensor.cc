#include "sharding/torch_tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ditserve::sharding {

absl::StatusOr<torch::ScalarType> TorchDType(DType dtype) {
  switch (dtype) {
    case DType::kF64: return torch::kFloat64;
    case DType::kF32: return torch::kFloat32;
    case DType::kF16: return torch::kFloat16;
    case DType::kBF16: return torch::kBFloat16;
    case DType::kI64: return torch::kInt64;
    case DType::kI32: return torch::kInt32;
    case DType::kI16: return torch::kInt16;
    case DType::kI8: return torch::kInt8;
    case DType::kU8: return torch::kUInt8;
    case DType::kBool: return torch::kBool;
    case DType::kF8E4M3:
    case DType::kF8E5M2: break;
  }
  return absl::UnimplementedError(
      absl::StrCat("dtype ", DTypeName(dtype), " is not supported by this LibTorch build"));
}

absl::StatusOr<DType> SafetensorsDType(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat64: return DType::kF64;
    case torch::kFloat32: return DType::kF32;
    case torch::kFloat16: return DType::kF16;
    case torch::kBFloat16: return DType::kBF16;
    case torch::kInt64: return DType::kI64;
    case torch::kInt32: return DType::kI32;
    case torch::kInt16: return DType::kI16;
    case torch::kInt8: return DType::kI8;
    case torch::kUInt8: return DType::kU8;
    case torch::kBool: return DType::kBool;
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("torch dtype ", c10::toString(type), " has no safetensors equivalent"));
}

absl::StatusOr<torch::Tensor> ReadWholeTensor(const SafetensorsFile& file, const TensorInfo& info) {
  auto dtype = TorchDType(info.dtype);
  if (!dtype.ok()) {
    return absl::Status(dtype.status().code(), absl::StrCat(file.path(), ": tensor '", info.name,
                                                            "': ", dtype.status().message()));
  }
  torch::Tensor out = torch::empty(info.shape, torch::TensorOptions().dtype(*dtype));
  if (info.nbytes() > 0) std::memcpy(out.data_ptr(), file.Data(info), info.nbytes());
  return out;
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadAllTensors(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  std::map<std::string, torch::Tensor> out;
  for (const auto& info : (*file)->tensors()) {
    auto t = ReadWholeTensor(**file, info);
    if (!t.ok()) return t.status();
    out[info.name] = std::move(*t);
  }
  return out;
}

}  // namespace ditserve::sharding
