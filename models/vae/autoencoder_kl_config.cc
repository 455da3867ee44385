#include "models/vae/autoencoder_kl_config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::vae {
namespace {

absl::StatusOr<VaeActivation> ParseAct(const std::string& name) {
  if (name == "silu" || name == "swish") return VaeActivation::kSilu;
  if (name == "mish") return VaeActivation::kMish;
  if (name == "gelu") return VaeActivation::kGelu;
  if (name == "relu") return VaeActivation::kRelu;
  return absl::InvalidArgumentError(absl::StrCat("unsupported VAE act_fn '", name, "'"));
}

}  // namespace

VaeEncoderConfig AutoencoderKLConfig::encoder() const {
  VaeEncoderConfig e;
  e.in_channels = in_channels;
  e.latent_channels = latent_channels;
  e.block_out_channels = block_out_channels;
  e.down_block_types = down_block_types;
  e.layers_per_block = layers_per_block;
  e.norm_num_groups = norm_num_groups;
  e.act_fn = act_fn;
  e.mid_block_add_attention = mid_block_add_attention;
  e.use_quant_conv = use_quant_conv;
  return e;
}

absl::StatusOr<AutoencoderKLConfig> ParseAutoencoderKLConfig(const std::string& json_text) {
  if (JsonNestingExceeds(json_text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE config nests deeper than ", kMaxJsonDepth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("VAE config is not a JSON object");
  return AutoencoderKLConfigFromJson(j);  // refuses a value that is not an object, in those words
}

absl::StatusOr<AutoencoderKLConfig> AutoencoderKLConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("VAE config is not a JSON object");
  AutoencoderKLConfig c;
  ASSIGN_OR_RETURN(c.in_channels, JsonField<int64_t>(j, "in_channels", c.in_channels));
  ASSIGN_OR_RETURN(c.latent_channels, JsonField<int64_t>(j, "latent_channels", c.latent_channels));
  ASSIGN_OR_RETURN(c.out_channels, JsonField<int64_t>(j, "out_channels", c.out_channels));
  ASSIGN_OR_RETURN(c.block_out_channels,
                   JsonField<std::vector<int64_t>>(j, "block_out_channels", c.block_out_channels));
  ASSIGN_OR_RETURN(c.layers_per_block,
                   JsonField<int64_t>(j, "layers_per_block", c.layers_per_block));
  ASSIGN_OR_RETURN(c.norm_num_groups, JsonField<int64_t>(j, "norm_num_groups", c.norm_num_groups));
  ASSIGN_OR_RETURN(std::string act, JsonField<std::string>(j, "act_fn", "silu"));
  ASSIGN_OR_RETURN(c.act_fn, ParseAct(act));
  ASSIGN_OR_RETURN(c.mid_block_add_attention,
                   JsonField<bool>(j, "mid_block_add_attention", c.mid_block_add_attention));
  ASSIGN_OR_RETURN(c.use_post_quant_conv,
                   JsonField<bool>(j, "use_post_quant_conv", c.use_post_quant_conv));
  ASSIGN_OR_RETURN(c.use_quant_conv, JsonField<bool>(j, "use_quant_conv", c.use_quant_conv));
  ASSIGN_OR_RETURN(c.scaling_factor, JsonField<double>(j, "scaling_factor", c.scaling_factor));
  ASSIGN_OR_RETURN(c.shift_factor, JsonField<double>(j, "shift_factor", c.shift_factor));

  ASSIGN_OR_RETURN(auto up_types,
                   JsonField<std::vector<std::string>>(j, "up_block_types", {"UpDecoderBlock2D"}));
  for (const auto& t : up_types) {
    if (t != "UpDecoderBlock2D") {
      return absl::InvalidArgumentError(absl::StrCat("unsupported VAE up block type '", t, "'"));
    }
  }
  ASSIGN_OR_RETURN(c.down_block_types,
                   JsonField<std::vector<std::string>>(j, "down_block_types", c.down_block_types));
  for (const auto& t : c.down_block_types) {
    if (t != kDownEncoderBlock2D) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported VAE down block type '", t, "'"));
    }
  }
  if (c.block_out_channels.empty() || up_types.size() != c.block_out_channels.size()) {
    return absl::InvalidArgumentError(absl::StrCat("VAE config: ", up_types.size(),
                                                   " up blocks for ", c.block_out_channels.size(),
                                                   " block_out_channels"));
  }
  if (c.in_channels <= 0 || c.latent_channels <= 0 || c.out_channels <= 0 ||
      c.layers_per_block < 0 || c.norm_num_groups <= 0 || c.scaling_factor == 0.0) {
    return absl::InvalidArgumentError(
        "VAE config has a non-positive size or a zero scaling_factor");
  }
  for (int64_t ch : c.block_out_channels) {
    if (ch <= 0 || ch % c.norm_num_groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "VAE block channels ", ch, " not divisible by norm_num_groups ", c.norm_num_groups));
    }
  }
  return c;
}

absl::StatusOr<AutoencoderKLConfig> LoadAutoencoderKLConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  auto config = ParseAutoencoderKLConfig(ss.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace ditserve::vae
