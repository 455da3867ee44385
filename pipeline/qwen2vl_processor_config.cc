#include "pipeline/qwen2vl_processor_config.h"

#include <array>
#include <cmath>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::pipeline {
namespace {

absl::Status Invalid(const std::string& file, const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": field '", field, "' ", why));
}

// A positive integer field into *out (absent or null: unchanged).
absl::Status ReadCount(const nlohmann::json& j, const char* key, const std::string& file,
                       const std::string& parent, int64_t* out) {
  ASSIGN_OR_RETURN(int64_t v, JsonFieldAt<int64_t>(j, key, *out, file, parent));
  if (v < 1 || v > kMaxConfigInt) {
    return Invalid(file, JsonFieldPath(parent, key),
                   absl::StrCat("must be in [1, ", kMaxConfigInt, "], got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadTriple(const nlohmann::json& j, const char* key, const std::string& file,
                        bool nonzero, std::array<double, 3>* out) {
  std::vector<double> fallback(out->begin(), out->end());
  ASSIGN_OR_RETURN(std::vector<double> v, JsonFieldAt<std::vector<double>>(j, key, fallback, file));
  if (v.size() != 3) {
    return Invalid(file, key, absl::StrCat("must hold 3 numbers (R, G, B), got ", v.size()));
  }
  for (double x : v) {
    if (!std::isfinite(x) || (nonzero && x == 0)) {
      return Invalid(file, key,
                     nonzero ? "must hold finite nonzero numbers" : "must hold finite numbers");
    }
  }
  *out = {v[0], v[1], v[2]};
  return absl::OkStatus();
}

absl::Status RequireOn(const nlohmann::json& j, const char* key, const std::string& file) {
  ASSIGN_OR_RETURN(bool on, JsonFieldAt<bool>(j, key, true, file));
  if (on) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(file, ": field '", key,
                   "' is false; the Qwen-Image-Edit pipelines' processor always does it"));
}

}  // namespace

absl::StatusOr<imaging::Qwen2VlImageConfig> ParseQwen2VlImageConfig(const nlohmann::json& j,
                                                                    const std::string& file) {
  imaging::Qwen2VlImageConfig c;
  ASSIGN_OR_RETURN(std::string type, JsonFieldAt<std::string>(j, "image_processor_type", "", file));
  if (!type.empty() && type != "Qwen2VLImageProcessor" && type != "Qwen2VLImageProcessorFast" &&
      type != "Qwen2VLImageProcessorPil") {
    return Invalid(file, "image_processor_type",
                   absl::StrCat("must name Qwen2VLImageProcessor, got '", type, "'"));
  }
  for (const char* key : {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) {
    RETURN_IF_ERROR(RequireOn(j, key, file));
  }
  if (auto it = j.find("size"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return JsonTypeError(file, "size", "an object", *it);
    RETURN_IF_ERROR(ReadCount(*it, "shortest_edge", file, "size", &c.min_pixels));
    RETURN_IF_ERROR(ReadCount(*it, "longest_edge", file, "size", &c.max_pixels));
  }
  RETURN_IF_ERROR(ReadCount(j, "min_pixels", file, "", &c.min_pixels));
  RETURN_IF_ERROR(ReadCount(j, "max_pixels", file, "", &c.max_pixels));
  if (c.min_pixels > c.max_pixels) {
    return Invalid(file, "min_pixels",
                   absl::StrCat("(", c.min_pixels, ") is above max_pixels (", c.max_pixels, ")"));
  }
  int64_t patch = c.patch_size, temporal = c.temporal_patch_size, merge = c.merge_size;
  RETURN_IF_ERROR(ReadCount(j, "patch_size", file, "", &patch));
  RETURN_IF_ERROR(ReadCount(j, "temporal_patch_size", file, "", &temporal));
  RETURN_IF_ERROR(ReadCount(j, "merge_size", file, "", &merge));
  // The processor's patches and the vision tower's kernel: small by construction (14, 2, 2).
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"patch_size", patch},
                                {"temporal_patch_size", temporal},
                                {"merge_size", merge}}) {
    if (v > 1024) return Invalid(file, name, absl::StrCat("must be at most 1024, got ", v));
  }
  c.patch_size = static_cast<int>(patch);
  c.temporal_patch_size = static_cast<int>(temporal);
  c.merge_size = static_cast<int>(merge);
  ASSIGN_OR_RETURN(c.rescale_factor,
                   JsonFieldAt<double>(j, "rescale_factor", c.rescale_factor, file));
  if (!std::isfinite(c.rescale_factor) || c.rescale_factor <= 0) {
    return Invalid(file, "rescale_factor", "must be a positive finite number");
  }
  RETURN_IF_ERROR(ReadTriple(j, "image_mean", file, /*nonzero=*/false, &c.image_mean));
  RETURN_IF_ERROR(ReadTriple(j, "image_std", file, /*nonzero=*/true, &c.image_std));
  return c;
}

absl::StatusOr<imaging::Qwen2VlImageConfig> LoadQwen2VlImageConfig(
    const std::string& processor_dir) {
  const std::string pre = processor_dir + "/preprocessor_config.json";
  std::error_code ec;
  if (std::filesystem::exists(pre, ec)) {
    ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(pre));
    return ParseQwen2VlImageConfig(j, pre);
  }
  const std::string proc = processor_dir + "/processor_config.json";
  if (!std::filesystem::exists(proc, ec)) {
    return absl::NotFoundError(
        absl::StrCat(processor_dir,
                     ": no preprocessor_config.json or processor_config.json "
                     "(the Qwen2-VL image processor's settings)"));
  }
  ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(proc));
  auto it = j.find("image_processor");
  if (it == j.end() || !it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(proc,
                     ": field 'image_processor' must be an object (the image processor's "
                     "settings)"));
  }
  return ParseQwen2VlImageConfig(*it, proc + " image_processor");
}

}  // namespace ditserve::pipeline
