#include "tools/tiny_model/vae_weights.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/tiny_model/config_fields.h"

namespace ditserve::tiny_model {
namespace {

void Resnet(TensorList& t, const std::string& prefix, int64_t in, int64_t out) {
  t.Norm(prefix + ".norm1", in);
  t.Conv(prefix + ".conv1", out, in, 3);
  t.Norm(prefix + ".norm2", out);
  t.Conv(prefix + ".conv2", out, out, 3);
  if (in != out) t.Conv(prefix + ".conv_shortcut", out, in, 1);
}

void MidBlock(TensorList& t, const std::string& prefix, int64_t channels, bool attention) {
  Resnet(t, prefix + ".resnets.0", channels, channels);
  if (attention) {
    const std::string a = prefix + ".attentions.0";
    t.Norm(a + ".group_norm", channels);
    for (const char* proj : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
      t.Linear(a + proj, channels, channels);
    }
  }
  Resnet(t, prefix + ".resnets.1", channels, channels);
}

absl::Status CheckBlockTypes(const std::vector<std::string>& types, size_t count,
                             const std::string& key, const std::string& expected) {
  if (types.size() != count) {
    return absl::InvalidArgumentError(absl::StrCat("AutoencoderKL config: \"", key, "\" has ",
                                                   types.size(), " entries, block_out_channels ",
                                                   count));
  }
  for (const std::string& type : types) {
    if (type != expected) {
      return absl::InvalidArgumentError(absl::StrCat("AutoencoderKL config: \"", key,
                                                     "\" may only hold ", expected, ", got ",
                                                     type));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorSpec>> AutoencoderKlTensors(const nlohmann::json& config) {
  const std::string c = "AutoencoderKL";
  ASSIGN_OR_RETURN(const int64_t in_channels, PositiveInt(config, c, "in_channels", 3));
  ASSIGN_OR_RETURN(const int64_t out_channels, PositiveInt(config, c, "out_channels", 3));
  ASSIGN_OR_RETURN(const int64_t latent, PositiveInt(config, c, "latent_channels", 4));
  ASSIGN_OR_RETURN(const int64_t per_block, PositiveInt(config, c, "layers_per_block", 1));
  ASSIGN_OR_RETURN(const int64_t groups, PositiveInt(config, c, "norm_num_groups", 32));
  ASSIGN_OR_RETURN(const std::vector<int64_t> blocks,
                   PositiveIntList(config, c, "block_out_channels"));
  ASSIGN_OR_RETURN(const bool mid_attention, Bool(config, c, "mid_block_add_attention", true));
  ASSIGN_OR_RETURN(const bool quant_conv, Bool(config, c, "use_quant_conv", true));
  ASSIGN_OR_RETURN(const bool post_quant_conv, Bool(config, c, "use_post_quant_conv", true));
  ASSIGN_OR_RETURN(const auto down_types, StringList(config, c, "down_block_types"));
  ASSIGN_OR_RETURN(const auto up_types, StringList(config, c, "up_block_types"));
  RETURN_IF_ERROR(
      CheckBlockTypes(down_types, blocks.size(), "down_block_types", "DownEncoderBlock2D"));
  RETURN_IF_ERROR(CheckBlockTypes(up_types, blocks.size(), "up_block_types", "UpDecoderBlock2D"));
  for (int64_t ch : blocks) {
    if (ch % groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          c, " config: block_out_channels entry ", ch, " is not divisible by norm_num_groups ",
          groups));
    }
  }

  TensorList t;
  const size_t n = blocks.size();
  // Encoder.
  t.Conv("encoder.conv_in", blocks[0], in_channels, 3);
  for (size_t i = 0; i < n; ++i) {
    const std::string b = absl::StrCat("encoder.down_blocks.", i);
    const int64_t in = i == 0 ? blocks[0] : blocks[i - 1];
    for (int64_t j = 0; j < per_block; ++j) {
      Resnet(t, absl::StrCat(b, ".resnets.", j), j == 0 ? in : blocks[i], blocks[i]);
    }
    if (i + 1 < n) t.Conv(b + ".downsamplers.0.conv", blocks[i], blocks[i], 3);
  }
  MidBlock(t, "encoder.mid_block", blocks[n - 1], mid_attention);
  t.Norm("encoder.conv_norm_out", blocks[n - 1]);
  t.Conv("encoder.conv_out", 2 * latent, blocks[n - 1], 3);
  if (quant_conv) t.Conv("quant_conv", 2 * latent, 2 * latent, 1);
  if (post_quant_conv) t.Conv("post_quant_conv", latent, latent, 1);

  // Decoder.
  std::vector<int64_t> reversed(blocks.rbegin(), blocks.rend());
  t.Conv("decoder.conv_in", reversed[0], latent, 3);
  MidBlock(t, "decoder.mid_block", reversed[0], mid_attention);
  int64_t previous = reversed[0];
  for (size_t i = 0; i < n; ++i) {
    const std::string b = absl::StrCat("decoder.up_blocks.", i);
    for (int64_t j = 0; j <= per_block; ++j) {
      Resnet(t, absl::StrCat(b, ".resnets.", j), j == 0 ? previous : reversed[i], reversed[i]);
    }
    if (i + 1 < n) t.Conv(b + ".upsamplers.0.conv", reversed[i], reversed[i], 3);
    previous = reversed[i];
  }
  t.Norm("decoder.conv_norm_out", blocks[0]);
  t.Conv("decoder.conv_out", out_channels, blocks[0], 3);
  return t.Release();
}

}  // namespace ditserve::tiny_model
