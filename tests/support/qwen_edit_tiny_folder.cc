#include "tests/support/qwen_edit_tiny_folder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/remove_tree.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "sharding/safetensors_writer.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

namespace fs = std::filesystem;
using Weights = std::map<std::string, torch::Tensor>;

constexpr char kBase[] = "qwenimage-tiny";
constexpr char kVaeFile[] = "diffusion_pytorch_model.safetensors";
// Streams of the seed: each part of the VAE, and its latents statistics, draws from its own
// generator, so that one part's values do not depend on whether another is drawn.
constexpr uint64_t kDecoderStream = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kStatsStream = 0xc2b2ae3d27d4eb4fULL;

// Random tensors of one part, named as diffusers names them.
class Drawer {
 public:
  Drawer(uint64_t seed, Weights* out) : gen_(compat::SeededCpuGenerator(seed)), out_(out) {}

  torch::Tensor Randn(const std::vector<int64_t>& shape) {
    return torch::randn(shape, gen_, torch::TensorOptions().dtype(torch::kFloat));
  }

  // QwenImageCausalConv3d: weight (out, in, kt, k, k), bias (out,).
  void Conv3d(const std::string& p, int64_t in, int64_t out, int64_t kt, int64_t k) {
    Put(p + ".weight",
        Randn({out, in, kt, k, k}) / std::sqrt(static_cast<double>(in * kt * k * k)));
    Put(p + ".bias", Randn({out}) * 0.1);
  }
  // nn.Conv2d: weight (out, in, k, k), bias (out,).
  void Conv2d(const std::string& p, int64_t in, int64_t out, int64_t k) {
    Put(p + ".weight", Randn({out, in, k, k}) / std::sqrt(static_cast<double>(in * k * k)));
    Put(p + ".bias", Randn({out}) * 0.1);
  }
  // QwenImageRMS_norm (bias=False): gamma (C, 1, 1, 1), or (C, 1, 1) with images=True.
  void Gamma(const std::string& p, int64_t c, bool images) {
    Put(p + ".gamma",
        1.0 +
            Randn(images ? std::vector<int64_t>{c, 1, 1} : std::vector<int64_t>{c, 1, 1, 1}) * 0.2);
  }
  // QwenImageResidualBlock(in, out): conv_shortcut (causal 1x1x1) iff in != out.
  void Residual(const std::string& p, int64_t in, int64_t out) {
    Gamma(p + ".norm1", in, false);
    Conv3d(p + ".conv1", in, out, 3, 3);
    Gamma(p + ".norm2", out, false);
    Conv3d(p + ".conv2", out, out, 3, 3);
    if (in != out) Conv3d(p + ".conv_shortcut", in, out, 1, 1);
  }
  // QwenImageAttentionBlock(c).
  void Attention(const std::string& p, int64_t c) {
    Gamma(p + ".norm", c, true);
    Conv2d(p + ".to_qkv", c, 3 * c, 1);
    Conv2d(p + ".proj", c, c, 1);
  }
  // QwenImageMidBlock(c, num_layers=1).
  void Mid(const std::string& p, int64_t c) {
    Residual(p + ".resnets.0", c, c);
    Attention(p + ".attentions.0", c);
    Residual(p + ".resnets.1", c, c);
  }

 private:
  void Put(const std::string& name, torch::Tensor t) { (*out_)[name] = t.contiguous(); }

  at::Generator gen_;
  Weights* out_;
};

// AutoencoderKLQwenImage.encoder (QwenImageEncoder3d with z_dim * 2 outputs) and quant_conv.
void DrawEncoder(const vae::AutoencoderKLQwenImageConfig& c, Drawer& d) {
  const std::vector<int64_t> dims = c.encoder_dims();
  d.Conv3d("encoder.conv_in", c.input_channels, dims[0], 3, 3);
  double scale = 1.0;
  int64_t index = 0;
  auto layer = [&] { return absl::StrCat("encoder.down_blocks.", index++); };
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    int64_t in = dims[i];
    const int64_t out = dims[i + 1];
    for (int64_t j = 0; j < c.num_res_blocks; ++j) {
      d.Residual(layer(), in, out);
      if (std::find(c.attn_scales.begin(), c.attn_scales.end(), scale) != c.attn_scales.end()) {
        d.Attention(layer(), out);
      }
      in = out;
    }
    if (i + 1 != c.dim_mult.size()) {
      const std::string p = layer();
      d.Conv2d(p + ".resample.1", out, out, 3);
      if (c.temperal_downsample[i]) d.Conv3d(p + ".time_conv", out, out, 3, 1);
      scale /= 2.0;
    }
  }
  const int64_t top = dims.back(), moments = 2 * c.z_dim;
  d.Mid("encoder.mid_block", top);
  d.Gamma("encoder.norm_out", top, false);
  d.Conv3d("encoder.conv_out", top, moments, 3, 3);
  d.Conv3d("quant_conv", moments, moments, 1, 1);
}

// AutoencoderKLQwenImage.post_quant_conv and decoder (QwenImageDecoder3d).
void DrawDecoder(const vae::AutoencoderKLQwenImageConfig& c, Drawer& d) {
  const std::vector<int64_t> dims = c.decoder_dims();
  const std::vector<bool> temporal = c.temperal_upsample();
  d.Conv3d("post_quant_conv", c.z_dim, c.z_dim, 1, 1);
  d.Conv3d("decoder.conv_in", c.z_dim, dims[0], 3, 3);
  d.Mid("decoder.mid_block", dims[0]);
  const size_t num_blocks = c.dim_mult.size();
  for (size_t i = 0; i < num_blocks; ++i) {
    const std::string p = absl::StrCat("decoder.up_blocks.", i);
    int64_t in = i > 0 ? dims[i] / 2 : dims[i];
    const int64_t out = dims[i + 1];
    for (int64_t j = 0; j < c.num_res_blocks + 1; ++j) {
      d.Residual(absl::StrCat(p, ".resnets.", j), in, out);
      in = out;
    }
    if (i + 1 != num_blocks) {
      d.Conv2d(p + ".upsamplers.0.resample.1", out, out / 2, 3);
      if (temporal[i]) d.Conv3d(p + ".upsamplers.0.time_conv", out, 2 * out, 3, 1);
    }
  }
  d.Gamma("decoder.norm_out", dims.back(), false);
  d.Conv3d("decoder.conv_out", dims.back(), c.input_channels, 3, 3);
}

absl::Status IoError(const std::string& what, const std::string& path, const std::error_code& ec) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", ec.message()));
}

absl::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::Status MakeDir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create", dir.string(), ec);
  return absl::OkStatus();
}

// The regular files of `from` (not recursive), copied byte for byte into `to` (created).
absl::Status CopyFiles(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::is_directory(from, ec)) {
    return absl::NotFoundError(absl::StrCat(from.string(), ": no such folder"));
  }
  RETURN_IF_ERROR(MakeDir(to));
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (ec) return IoError("cannot list", from.string(), ec);
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    fs::copy_file(f, to / f.filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError("cannot copy", f.string(), ec);
  }
  return absl::OkStatus();
}

vae::AutoencoderKLQwenImageConfig EditVaeConfig(uint64_t seed) {
  vae::AutoencoderKLQwenImageConfig c;
  c.base_dim = 4;
  c.z_dim = 4;
  c.dim_mult = {1, 1, 1, 1, 1};
  c.num_res_blocks = 1;
  c.attn_scales = {};
  c.temperal_downsample = {false, true, true, false};
  c.input_channels = 3;
  // make_qwen_edit_fixtures.py's build_vae: 0.5 * randn(4), 0.5 + 2 * rand(4), 4 decimals.
  at::Generator gen = compat::SeededCpuGenerator(seed ^ kStatsStream);
  auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto mean = torch::randn({c.z_dim}, gen, options) * 0.5;
  auto std = torch::rand({c.z_dim}, gen, options) * 2.0 + 0.5;
  auto round4 = [](double x) { return std::round(x * 1e4) / 1e4; };
  c.latents_mean.clear();
  c.latents_std.clear();
  for (int64_t i = 0; i < c.z_dim; ++i) {
    c.latents_mean.push_back(round4(mean[i].item<double>()));
    c.latents_std.push_back(round4(std[i].item<double>()));
  }
  return c;
}

// config.json as diffusers' save_config writes it (sorted keys, indent 2).
std::string VaeConfigJson(const vae::AutoencoderKLQwenImageConfig& c,
                          const std::string& diffusers_version) {
  nlohmann::json j;
  j["_class_name"] = "AutoencoderKLQwenImage";
  j["_diffusers_version"] = diffusers_version;
  j["attn_scales"] = nlohmann::json::array();
  for (double s : c.attn_scales) j["attn_scales"].push_back(s);
  j["base_dim"] = c.base_dim;
  j["dim_mult"] = c.dim_mult;
  j["dropout"] = 0.0;
  j["input_channels"] = c.input_channels;
  j["latents_mean"] = c.latents_mean;
  j["latents_std"] = c.latents_std;
  j["num_res_blocks"] = c.num_res_blocks;
  j["temperal_downsample"] = nlohmann::json::array();
  for (bool b : c.temperal_downsample) j["temperal_downsample"].push_back(b);
  j["z_dim"] = c.z_dim;
  return j.dump(2) + "\n";
}

// The keys make_qwen_edit_fixtures.py's build_processor writes, in its order (json.dump indent 1).
std::string PreprocessorConfigJson() {
  nlohmann::ordered_json j;
  j["min_pixels"] = 56 * 56;
  j["max_pixels"] = 28 * 28 * 40;
  j["patch_size"] = 14;
  j["temporal_patch_size"] = 2;
  j["merge_size"] = 2;
  j["image_mean"] = {0.48145466, 0.4578275, 0.40821073};
  j["image_std"] = {0.26862954, 0.26130258, 0.27577711};
  j["image_processor_type"] = "Qwen2VLImageProcessor";
  j["processor_class"] = "Qwen2VLProcessor";
  return j.dump(1) + "\n";
}

absl::Status WriteVae(const fs::path& vae_dir, uint64_t seed,
                      const std::string& diffusers_version) {
  const vae::AutoencoderKLQwenImageConfig config = EditVaeConfig(seed);
  RETURN_IF_ERROR(MakeDir(vae_dir));
  RETURN_IF_ERROR(WriteText(vae_dir / "config.json", VaeConfigJson(config, diffusers_version)));
  const Weights weights = RandomQwenImageVaeWeights(config, seed);
  std::vector<sharding::TensorToWrite> tensors;
  tensors.reserve(weights.size());
  for (const auto& [name, t] : weights) {
    tensors.push_back({name, sharding::DType::kF32, t.sizes().vec(), t.data_ptr()});
  }
  return sharding::WriteSafetensors((vae_dir / kVaeFile).string(), tensors, {{"format", "pt"}});
}

}  // namespace

Weights RandomQwenImageVaeWeights(const vae::AutoencoderKLQwenImageConfig& config, uint64_t seed,
                                  QwenImageVaeParts parts) {
  Weights out;
  if (parts.encoder) {
    Drawer d(seed, &out);
    DrawEncoder(config, d);
  }
  if (parts.decoder) {
    Drawer d(seed ^ kDecoderStream, &out);
    DrawDecoder(config, d);
  }
  return out;
}

absl::StatusOr<std::string> WriteQwenEditTinyFolder(const std::string& dir, uint64_t seed,
                                                    const std::string& pipeline_class) {
  if (dir.empty()) return absl::InvalidArgumentError("WriteQwenEditTinyFolder: empty folder path");
  const fs::path base = fs::path(FixturesDir()) / kBase;
  const fs::path root(dir);
  ASSIGN_OR_RETURN(std::string index_text, ReadTextFile((base / "model_index.json").string()));
  nlohmann::json index = nlohmann::json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object()) {
    return absl::InternalError(absl::StrCat((base / "model_index.json").string(), ": not JSON"));
  }
  const std::string diffusers_version = index.value("_diffusers_version", "0.40.0.dev0");

  RETURN_IF_ERROR(RemoveTree(root.string()));
  RETURN_IF_ERROR(MakeDir(root));
  for (const char* component : {"scheduler", "text_encoder", "tokenizer", "transformer"}) {
    RETURN_IF_ERROR(CopyFiles(base / component, root / component));
  }
  RETURN_IF_ERROR(CopyFiles(base / "tokenizer", root / "processor"));
  RETURN_IF_ERROR(
      WriteText(root / "processor" / "preprocessor_config.json", PreprocessorConfigJson()));
  RETURN_IF_ERROR(WriteVae(root / "vae", seed, diffusers_version));

  // nlohmann::json keeps keys sorted, as diffusers' to_json_string(sort_keys=True).
  index["_class_name"] = pipeline_class;
  index["processor"] = {"transformers", "Qwen2VLProcessor"};
  RETURN_IF_ERROR(WriteText(root / "model_index.json", index.dump(2) + "\n"));
  return dir;
}

}  // namespace ditserve::testing
