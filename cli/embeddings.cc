#include "cli/embeddings.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sharding/safetensors.h"

namespace ditserve::cli {
namespace {

using sharding::DType;

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: normalise into a float32 exponent.
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

absl::StatusOr<float> ElementToFloat(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kF32: return Load<float>(p);
    case DType::kF64: return static_cast<float>(Load<double>(p));
    case DType::kF16: return HalfToFloat(Load<uint16_t>(p));
    case DType::kBF16: {
      uint32_t bits = static_cast<uint32_t>(Load<uint16_t>(p)) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return f;
    }
    case DType::kI64: return static_cast<float>(Load<int64_t>(p));
    case DType::kI32: return static_cast<float>(Load<int32_t>(p));
    case DType::kI16: return static_cast<float>(Load<int16_t>(p));
    case DType::kI8: return static_cast<float>(Load<int8_t>(p));
    case DType::kU8: return static_cast<float>(Load<uint8_t>(p));
    case DType::kBool: return *p != 0 ? 1.0f : 0.0f;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", sharding::DTypeName(dtype), " cannot be sent as float32"));
  }
}

absl::Status ToTensor(const sharding::SafetensorsFile& file, const sharding::TensorInfo& info,
                      ditserve::v1::Tensor* out) {
  out->set_dtype(ditserve::v1::DTYPE_FLOAT32);
  for (int64_t d : info.shape) out->add_shape(d);
  const uint8_t* src = file.Data(info);
  uint64_t numel = info.numel();
  size_t element = sharding::DTypeSize(info.dtype);
  std::string* data = out->mutable_data();
  data->resize(numel * sizeof(float));
  for (uint64_t i = 0; i < numel; ++i) {
    absl::StatusOr<float> v = ElementToFloat(info.dtype, src + i * element);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": tensor '", info.name, "': ", v.status().message()));
    }
    std::memcpy(data->data() + i * sizeof(float), &*v, sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ditserve::v1::PromptEmbeddings> LoadPromptEmbeddings(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<sharding::SafetensorsFile> file,
                   sharding::SafetensorsFile::Open(path));
  ditserve::v1::PromptEmbeddings out;
  bool has_prompt_embeds = false;
  for (const sharding::TensorInfo& info : file->tensors()) {
    ditserve::v1::Tensor* dst = nullptr;
    if (info.name == "prompt_embeds") {
      dst = out.mutable_prompt_embeds();
      has_prompt_embeds = true;
    } else if (info.name == "pooled_prompt_embeds") {
      dst = out.mutable_pooled_prompt_embeds();
    } else if (info.name == "text_mask") {
      dst = out.mutable_text_mask();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": unexpected tensor '", info.name,
          "' (expected prompt_embeds, pooled_prompt_embeds, text_mask)"));
    }
    RETURN_IF_ERROR(ToTensor(*file, info, dst));
  }
  if (!has_prompt_embeds) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no tensor named 'prompt_embeds'"));
  }
  return out;
}

}  // namespace ditserve::cli
