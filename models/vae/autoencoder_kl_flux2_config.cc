#include "models/vae/autoencoder_kl_flux2_config.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::vae {
namespace {

constexpr char kContext[] = "AutoencoderKLFlux2 config";

// AutoencoderKLFlux2.__init__ defaults of the fields the decoder and encoder halves read, in
// AutoencoderKL config.json spelling (ParseAutoencoderKLConfig would otherwise fill
// AutoencoderKL's defaults).
nlohmann::json DecoderDefaults() {
  return {{"in_channels", 3},
          {"out_channels", 3},
          {"up_block_types", std::vector<std::string>(4, "UpDecoderBlock2D")},
          {"down_block_types", std::vector<std::string>(4, kDownEncoderBlock2D)},
          {"block_out_channels", {128, 256, 512, 512}},
          {"layers_per_block", 2},
          {"act_fn", "silu"},
          {"latent_channels", 32},
          {"norm_num_groups", 32},
          {"use_post_quant_conv", true},
          {"use_quant_conv", true},
          {"mid_block_add_attention", true}};
}

absl::Status FieldError(const char* key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(kContext, ": '", key, "' ", what));
}

}  // namespace

absl::StatusOr<AutoencoderKLFlux2Config> ParseAutoencoderKLFlux2Config(
    const std::string& json_text) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonObject(json_text));
  return AutoencoderKLFlux2ConfigFromJson(j);
}

absl::StatusOr<AutoencoderKLFlux2Config> AutoencoderKLFlux2ConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object())
    return absl::InvalidArgumentError("AutoencoderKLFlux2 config is not a JSON object");
  AutoencoderKLFlux2Config c;

  RETURN_IF_ERROR(ReadPositiveIntList(j, "block_out_channels", &c.block_out_channels, kContext));
  RETURN_IF_ERROR(ReadPositiveIntList(j, "patch_size", &c.patch_size, kContext));
  if (c.patch_size != std::vector<int64_t>{2, 2}) {
    return FieldError("patch_size",
                      absl::StrCat("must be [2, 2] (the pipeline un-patchifies 2x2), got [",
                                   absl::StrJoin(c.patch_size, ", "), "]"));
  }
  auto eps = j.find("batch_norm_eps");
  if (eps != j.end() && !eps->is_null()) {
    if (!eps->is_number() || !(eps->get<double>() >= 0.0)) {
      return FieldError("batch_norm_eps", absl::StrCat("must be a number >= 0, got ", eps->dump()));
    }
    c.batch_norm_eps = eps->get<double>();
  }

  // The Decoder half: Flux2 defaults overlaid with the file's values, then the shared parser.
  nlohmann::json dec = DecoderDefaults();
  for (auto& [key, value] : dec.items()) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) value = *it;
  }
  auto dbo = j.find("decoder_block_out_channels");
  const bool separate_decoder_channels = dbo != j.end() && !dbo->is_null();
  if (separate_decoder_channels) {
    std::vector<int64_t> channels;
    RETURN_IF_ERROR(ReadPositiveIntList(j, "decoder_block_out_channels", &channels, kContext));
    dec["block_out_channels"] = channels;
  }
  auto decoder = ParseAutoencoderKLConfig(dec.dump());
  if (!decoder.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kContext,
        separate_decoder_channels ? " (decoder built from decoder_block_out_channels): " : ": ",
        decoder.status().message()));
  }
  c.decoder = *std::move(decoder);
  c.encoder = c.decoder.encoder();
  c.encoder.block_out_channels = c.block_out_channels;
  c.decoder.scaling_factor = 1.0;  // unused by FLUX.2 (BatchNorm de-normalisation instead)
  c.decoder.shift_factor = 0.0;
  return c;
}

absl::StatusOr<AutoencoderKLFlux2Config> LoadAutoencoderKLFlux2Config(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  auto config = ParseAutoencoderKLFlux2Config(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace ditserve::vae
