#include "common/model_flags.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ditserve {
namespace {

// One spelling per value, in the order the error lists them.
template <typename E, size_t N>
using Spellings = std::pair<E, const char*>[N];

// "a", "a or b", "a, b or c".
template <typename E, size_t N>
std::string Accepted(const Spellings<E, N>& values) {
  std::string list;
  for (size_t i = 0; i < N; ++i) {
    list += i == 0 ? "" : i + 1 == N ? " or " : ", ";
    list += values[i].second;
  }
  return list;
}

template <typename E, size_t N>
absl::StatusOr<E> Parse(const Spellings<E, N>& values, absl::string_view value,
                        absl::string_view field) {
  for (const auto& [e, name] : values) {
    if (value == name) return e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be ", Accepted(values), ", got '", value, "'"));
}

template <typename E, size_t N>
const char* Name(const Spellings<E, N>& values, E e) {
  for (const auto& [v, name] : values) {
    if (v == e) return name;
  }
  return "?";
}

constexpr std::pair<ModelDtype, const char*> kDtypes[] = {{ModelDtype::kFloat32, "float32"},
                                                          {ModelDtype::kBFloat16, "bfloat16"}};
constexpr std::pair<DeviceKind, const char*> kDevices[] = {{DeviceKind::kCpu, "cpu"},
                                                           {DeviceKind::kCuda, "cuda"}};
constexpr std::pair<TextEncoderPlacement, const char*> kPlacements[] = {
    {TextEncoderPlacement::kAuto, "auto"},
    {TextEncoderPlacement::kSharded, "sharded"},
    {TextEncoderPlacement::kRank0, "rank0"}};
constexpr std::pair<LoraMode, const char*> kLoraModes[] = {{LoraMode::kMerge, "merge"},
                                                           {LoraMode::kRuntime, "runtime"}};

}  // namespace

absl::StatusOr<ModelDtype> ParseModelDtype(absl::string_view value, absl::string_view field) {
  return Parse(kDtypes, value, field);
}
const char* ModelDtypeName(ModelDtype dtype) { return Name(kDtypes, dtype); }

absl::StatusOr<DeviceKind> ParseDeviceKind(absl::string_view value, absl::string_view field) {
  return Parse(kDevices, value, field);
}
const char* DeviceKindName(DeviceKind kind) { return Name(kDevices, kind); }

absl::StatusOr<TextEncoderPlacement> ParseTextEncoderPlacement(absl::string_view value,
                                                               absl::string_view field) {
  return Parse(kPlacements, value, field);
}
const char* TextEncoderPlacementName(TextEncoderPlacement placement) {
  return Name(kPlacements, placement);
}

absl::StatusOr<LoraMode> ParseLoraMode(absl::string_view value, absl::string_view field) {
  return Parse(kLoraModes, value, field);
}
const char* LoraModeName(LoraMode mode) { return Name(kLoraModes, mode); }

absl::StatusOr<WeightFormat> ParseWeightFormat(const std::string& name) {
  if (name == "dtype") return WeightFormat::kModelDtype;
  if (name == "fp8") return WeightFormat::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("--weights must be 'dtype' or 'fp8', got '", name, "'"));
}

const char* WeightFormatName(WeightFormat f) {
  return f == WeightFormat::kFp8 ? "fp8" : "dtype";
}

}  // namespace ditserve
