#include "common/model_flags.h"

#include "absl/strings/str_cat.h"

namespace ditserve {

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
