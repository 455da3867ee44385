#include "models/vae/autoencoder_kl_qwenimage_config.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::vae {
namespace {

constexpr char kContext[] = "AutoencoderKLQwenImage config";

absl::Status FieldError(const char* key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(kContext, ": '", key, "' ", what));
}

absl::StatusOr<std::vector<double>> NumberList(const nlohmann::json& j, const char* key,
                                               std::vector<double> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_array()) {
    return FieldError(key, absl::StrCat("must be a list of numbers, got ", JsonTypePhrase(*it)));
  }
  std::vector<double> out;
  for (const auto& v : *it) {
    if (!v.is_number()) {
      return FieldError(
          key, absl::StrCat("must be a list of numbers, got ", JsonTypePhrase(v), " in it"));
    }
    out.push_back(v.get<double>());
  }
  return out;
}

absl::StatusOr<std::vector<bool>> BoolList(const nlohmann::json& j, const char* key,
                                           std::vector<bool> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_array()) {
    return FieldError(key, absl::StrCat("must be a list of booleans, got ", JsonTypePhrase(*it)));
  }
  std::vector<bool> out;
  for (const auto& v : *it) {
    if (!v.is_boolean()) {
      return FieldError(
          key, absl::StrCat("must be a list of booleans, got ", JsonTypePhrase(v), " in it"));
    }
    out.push_back(v.get<bool>());
  }
  return out;
}

}  // namespace

std::vector<int64_t> AutoencoderKLQwenImageConfig::decoder_dims() const {
  std::vector<int64_t> dims = {base_dim * dim_mult.back()};
  for (auto it = dim_mult.rbegin(); it != dim_mult.rend(); ++it) dims.push_back(base_dim * *it);
  return dims;
}

std::vector<int64_t> AutoencoderKLQwenImageConfig::encoder_dims() const {
  std::vector<int64_t> dims = {base_dim};
  for (int64_t m : dim_mult) dims.push_back(base_dim * m);
  return dims;
}

absl::StatusOr<AutoencoderKLQwenImageConfig> ParseAutoencoderKLQwenImageConfig(
    const std::string& json_text) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonObject(json_text));
  return AutoencoderKLQwenImageConfigFromJson(j);
}

absl::StatusOr<AutoencoderKLQwenImageConfig> AutoencoderKLQwenImageConfigFromJson(
    const nlohmann::json& j) {
  if (!j.is_object())
    return absl::InvalidArgumentError("AutoencoderKLQwenImage config is not a JSON object");
  AutoencoderKLQwenImageConfig c;
  RETURN_IF_ERROR(ReadPositiveInt(j, "base_dim", &c.base_dim, kContext));
  RETURN_IF_ERROR(ReadPositiveInt(j, "z_dim", &c.z_dim, kContext));
  RETURN_IF_ERROR(ReadPositiveInt(j, "num_res_blocks", &c.num_res_blocks, kContext));
  RETURN_IF_ERROR(ReadPositiveInt(j, "input_channels", &c.input_channels, kContext));
  RETURN_IF_ERROR(ReadPositiveIntList(j, "dim_mult", &c.dim_mult, kContext));
  ASSIGN_OR_RETURN(c.temperal_downsample,
                   BoolList(j, "temperal_downsample", c.temperal_downsample));
  ASSIGN_OR_RETURN(c.latents_mean, NumberList(j, "latents_mean", c.latents_mean));
  ASSIGN_OR_RETURN(c.latents_std, NumberList(j, "latents_std", c.latents_std));
  ASSIGN_OR_RETURN(c.attn_scales, NumberList(j, "attn_scales", c.attn_scales));

  if (c.temperal_downsample.size() + 1 != c.dim_mult.size()) {
    return FieldError("temperal_downsample",
                      absl::StrCat("has ", c.temperal_downsample.size(), " entries; dim_mult's ",
                                   c.dim_mult.size(), " blocks need ", c.dim_mult.size() - 1));
  }
  auto has_z_dim_values = [&](const char* key, const std::vector<double>& v) {
    return static_cast<int64_t>(v.size()) == c.z_dim
               ? absl::OkStatus()
               : FieldError(key, absl::StrCat("has ", v.size(), " values for z_dim ", c.z_dim));
  };
  RETURN_IF_ERROR(has_z_dim_values("latents_mean", c.latents_mean));
  RETURN_IF_ERROR(has_z_dim_values("latents_std", c.latents_std));
  for (double s : c.latents_std) {
    if (s == 0.0) return FieldError("latents_std", "holds a zero");
  }
  // Every upsampler maps its block's out_dim to out_dim / 2 channels, which must stay positive.
  for (int64_t d : c.decoder_dims()) {
    if (d / 2 < 1) return FieldError("base_dim", "too small: an upsampler would have 0 channels");
  }
  return c;
}

absl::StatusOr<AutoencoderKLQwenImageConfig> LoadAutoencoderKLQwenImageConfig(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  auto config = ParseAutoencoderKLQwenImageConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace ditserve::vae
