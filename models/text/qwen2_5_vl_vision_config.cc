#include "models/text/qwen2_5_vl_vision_config.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::text {
namespace {

using nlohmann::json;

constexpr char kVision[] = "vision_config";

absl::Status FieldError(const std::string& where, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": field '", field, "' ", what));
}

// vision_config.<key> as a positive integer (at most kMaxConfigInt). Absent or null: an error when
// `required`, else *out keeps its default.
absl::Status ReadPositive(const json& v, const char* key, bool required, const std::string& where,
                          int64_t* out) {
  auto it = v.find(key);
  if (it == v.end() || it->is_null()) {
    return required ? FieldError(where, JsonFieldPath(kVision, key), "is missing")
                    : absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int64_t value, JsonFieldAt<int64_t>(v, key, int64_t{0}, where, kVision));
  if (value <= 0 || value > kMaxConfigInt) {
    return FieldError(
        where, JsonFieldPath(kVision, key),
        absl::StrCat("must be a positive integer (at most ", kMaxConfigInt, "), got ", value));
  }
  *out = value;
  return absl::OkStatus();
}

// The top-level and vision model types, when given, must be Qwen2.5-VL's.
absl::Status CheckModelTypes(const json& j, const json& v, const std::string& where) {
  ASSIGN_OR_RETURN(const std::string top,
                   JsonFieldAt<std::string>(j, "model_type", std::string(), where));
  if (!top.empty() && top != "qwen2_5_vl") {
    return FieldError(
        where, "model_type",
        absl::StrCat("is '", top, "'; this vision tower is Qwen2.5-VL's (qwen2_5_vl)"));
  }
  ASSIGN_OR_RETURN(const std::string vision,
                   JsonFieldAt<std::string>(v, "model_type", std::string(), where, kVision));
  // transformers 5 writes qwen2_5_vl_vision; older versions wrote the parent's qwen2_5_vl.
  if (!vision.empty() && vision != "qwen2_5_vl_vision" && vision != "qwen2_5_vl") {
    return FieldError(where, JsonFieldPath(kVision, "model_type"),
                      absl::StrCat("is '", vision, "', expected 'qwen2_5_vl_vision'"));
  }
  return absl::OkStatus();
}

// vision_config.rope_parameters: {rope_type: "axial" | "default", rope_theta}.
absl::Status ReadRope(const json& v, const std::string& where, Qwen25VlVisionConfig* c) {
  auto rp = v.find("rope_parameters");
  if (rp == v.end() || rp->is_null()) return absl::OkStatus();
  const std::string name = JsonFieldPath(kVision, "rope_parameters");
  if (!rp->is_object()) return JsonTypeError(where, name, "an object", *rp);
  for (auto it = rp->begin(); it != rp->end(); ++it) {
    if (it.key() != "rope_type" && it.key() != "rope_theta") {
      return FieldError(where, JsonFieldPath(name, it.key()),
                        "is not supported by the Qwen2.5-VL vision tower");
    }
  }
  ASSIGN_OR_RETURN(const std::string type,
                   JsonFieldAt<std::string>(*rp, "rope_type", std::string("axial"), where, name));
  if (type != "axial" && type != "default") {
    return FieldError(where, JsonFieldPath(name, "rope_type"),
                      absl::StrCat("is '", type, "'; only the 2-D axial RoPE is supported"));
  }
  ASSIGN_OR_RETURN(c->rope_theta,
                   JsonFieldAt<double>(*rp, "rope_theta", c->rope_theta, where, name));
  if (!(c->rope_theta > 0)) {
    return FieldError(where, JsonFieldPath(name, "rope_theta"), "must be positive");
  }
  return absl::OkStatus();
}

// The checks across fields.
absl::Status CheckShapes(const std::string& where, const Qwen25VlVisionConfig& c) {
  if (c.hidden_size % c.num_heads != 0) {
    return FieldError(
        where, JsonFieldPath(kVision, "hidden_size"),
        absl::StrCat("(", c.hidden_size, ") must be divisible by num_heads (", c.num_heads, ")"));
  }
  if (c.head_dim() % 4 != 0) {
    return FieldError(where, JsonFieldPath(kVision, "hidden_size"),
                      absl::StrCat("gives a head_dim of ", c.head_dim(),
                                   "; the 2-D rotary embedding needs a multiple of 4"));
  }
  if (c.merger_window_size() < 1) {
    return FieldError(where, JsonFieldPath(kVision, "window_size"),
                      absl::StrCat("(", c.window_size, ") must be at least spatial_merge_size * ",
                                   "patch_size (", c.spatial_merge_size * c.patch_size, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Qwen25VlVisionConfig> Parse(const json& j, const std::string& where) {
  auto vit = j.find(kVision);
  if (vit == j.end() || vit->is_null()) return FieldError(where, kVision, "is missing");
  if (!vit->is_object()) return JsonTypeError(where, kVision, "an object", *vit);
  const json& v = *vit;
  RETURN_IF_ERROR(CheckModelTypes(j, v, where));

  Qwen25VlVisionConfig c;
  RETURN_IF_ERROR(ReadPositive(v, "depth", true, where, &c.depth));
  RETURN_IF_ERROR(ReadPositive(v, "hidden_size", true, where, &c.hidden_size));
  RETURN_IF_ERROR(ReadPositive(v, "intermediate_size", true, where, &c.intermediate_size));
  RETURN_IF_ERROR(ReadPositive(v, "num_heads", true, where, &c.num_heads));
  RETURN_IF_ERROR(ReadPositive(v, "out_hidden_size", true, where, &c.out_hidden_size));
  RETURN_IF_ERROR(ReadPositive(v, "in_channels", false, where, &c.in_channels));
  RETURN_IF_ERROR(ReadPositive(v, "patch_size", false, where, &c.patch_size));
  RETURN_IF_ERROR(ReadPositive(v, "temporal_patch_size", false, where, &c.temporal_patch_size));
  RETURN_IF_ERROR(ReadPositive(v, "spatial_merge_size", false, where, &c.spatial_merge_size));
  RETURN_IF_ERROR(ReadPositive(v, "window_size", false, where, &c.window_size));
  ASSIGN_OR_RETURN(c.fullatt_block_indexes,
                   JsonFieldAt<std::vector<int64_t>>(v, "fullatt_block_indexes",
                                                     c.fullatt_block_indexes, where, kVision));
  ASSIGN_OR_RETURN(const std::string act,
                   JsonFieldAt<std::string>(v, "hidden_act", std::string("silu"), where, kVision));
  auto parsed = ParseActivation(act);
  if (!parsed.ok()) {
    return FieldError(where, JsonFieldPath(kVision, "hidden_act"),
                      absl::StrCat("is '", act, "': ", parsed.status().message()));
  }
  c.hidden_act = *parsed;
  RETURN_IF_ERROR(ReadRope(v, where, &c));
  RETURN_IF_ERROR(CheckShapes(where, c));
  return c;
}

}  // namespace

bool Qwen25VlVisionConfig::IsFullAttentionBlock(int64_t layer) const {
  return std::find(fullatt_block_indexes.begin(), fullatt_block_indexes.end(), layer) !=
         fullatt_block_indexes.end();
}

absl::StatusOr<Qwen25VlVisionConfig> ParseQwen25VlVisionConfig(const std::string& json_text,
                                                               const std::string& where) {
  auto j = ParseJsonObject(json_text);
  if (!j.ok()) return WithFile(j.status(), where);
  return Parse(*j, where);
}

absl::StatusOr<Qwen25VlVisionConfig> Qwen25VlVisionConfigFromJson(const nlohmann::json& j,
                                                                  const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  return Parse(j, where);
}

absl::StatusOr<Qwen25VlVisionConfig> LoadQwen25VlVisionConfig(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));
  return ParseQwen25VlVisionConfig(text, file);
}

}  // namespace ditserve::text
