#include "tools/tiny_model/random_init.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ditserve::tiny_model {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t Fnv1a64(const std::string& text) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Uniform in (0, 1]: never 0, so log() below is finite.
double Uniform(uint64_t* state) {
  return (static_cast<double>(SplitMix64(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

uint16_t ToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a NaN
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// numel(spec.shape) float32 values.
std::vector<float> InitialValues(const TensorSpec& spec, uint64_t seed) {
  int64_t numel = 1;
  for (int64_t d : spec.shape) numel *= d;
  std::vector<float> values(static_cast<size_t>(numel), 0.0f);
  switch (spec.init) {
    case TensorInit::kZeros:
      break;
    case TensorInit::kOnes:
      for (float& v : values) v = 1.0f;
      break;
    case TensorInit::kNormal: {
      uint64_t state = seed ^ Fnv1a64(spec.name);
      SplitMix64(&state);  // decorrelate nearby seeds
      constexpr double kTwoPi = 6.283185307179586476925286766559;
      for (size_t i = 0; i < values.size(); i += 2) {
        const double radius = std::sqrt(-2.0 * std::log(Uniform(&state)));
        const double angle = kTwoPi * Uniform(&state);
        values[i] = static_cast<float>(spec.stddev * radius * std::cos(angle));
        if (i + 1 < values.size()) {
          values[i + 1] = static_cast<float>(spec.stddev * radius * std::sin(angle));
        }
      }
      break;
    }
  }
  return values;
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> InitialBytes(const TensorSpec& spec, uint64_t seed,
                                                  sharding::DType dtype) {
  const std::vector<float> values = InitialValues(spec, seed);
  std::vector<uint8_t> bytes;
  if (dtype == sharding::DType::kF32) {
    bytes.resize(values.size() * sizeof(float));
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  } else if (dtype == sharding::DType::kBF16) {
    bytes.resize(values.size() * sizeof(uint16_t));
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = ToBFloat16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &b, sizeof(b));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "tiny model weights are float32 or bfloat16, not ", sharding::DTypeName(dtype)));
  }
  return bytes;
}

}  // namespace ditserve::tiny_model
