// libFuzzer target: the JSON readers of a model folder, fed arbitrary text. Each input is used as
//   - model_index.json of a pipeline root (ReadPipelineIndex, ResolveComponentDir),
//   - config.json of a component folder (ReadComponentConfig: the quantization_config check), then
//     parsed as every transformer config (FLUX.1, FLUX.2, Qwen-Image) the way the loaders do,
//   - the text of every text-encoder and VAE config parser (CLIP, T5, the LLM encoders, AutoencoderKL,
//     AutoencoderKLFlux2, AutoencoderKLQwenImage),
//   - diffusion_pytorch_model.safetensors.index.json of a component folder (ComponentCheckpoint::Open:
//     the weight_map reader; the shards it names do not exist, so it ends in NOT_FOUND at best).
// The files go through the real file readers (written into a private temporary folder first), so
// the path a downloaded file takes is the path fuzzed. Every call must return a Status: no crash,
// no exception, no sanitizer report, no unbounded time or memory.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/config_json.h"
#include "models/flux1/flux1_config.h"
#include "models/flux2/flux2_config.h"
#include "models/qwenimage/qwenimage_config.h"
#include "models/text/causal_lm_config.h"
#include "models/text/clip_text_config.h"
#include "models/text/t5_config.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/autoencoder_kl_flux2_config.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "sharding/checkpoint.h"
#include "sharding/pipeline_index.h"

namespace {

namespace fs = std::filesystem;

std::string g_root;       // a pipeline root: model_index.json
std::string g_component;  // <root>/transformer: config.json
std::string g_indexed;    // <root>/indexed: config.json {} + the input as the weights index

void WriteFile(const std::string& path, const char* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(size));
}

void RemoveRoot() {
  if (g_root.empty()) return;
  std::error_code ec;
  fs::remove_all(g_root, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string tmpl = (fs::temp_directory_path() / "ditserve-config-fuzz-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  g_root = tmpl;
  g_component = g_root + "/transformer";
  g_indexed = g_root + "/indexed";
  fs::create_directories(g_component);
  fs::create_directories(g_indexed);
  WriteFile(g_indexed + "/config.json", "{}", 2);
  std::atexit(RemoveRoot);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  const std::string text(bytes, size);

  // model_index.json.
  WriteFile(g_root + "/model_index.json", bytes, size);
  auto index = ditserve::sharding::ReadPipelineIndex(g_root);
  if (index.ok()) {
    for (const auto& c : index->components) {
      if (c.name.empty() || !index->ComponentDir(c.name).ok()) __builtin_trap();
    }
    (void)ditserve::sharding::ResolveComponentDir(g_root, "transformer");
  }

  // config.json of a transformer folder, through the reader and each transformer config parser.
  WriteFile(g_component + "/config.json", bytes, size);
  auto config = ditserve::sharding::ReadComponentConfig(g_component);
  if (config.ok()) {
    if (!config->is_object()) __builtin_trap();
    (void)ditserve::models::flux1::ParseFluxTransformerConfig(*config);
    (void)ditserve::models::flux2::ParseFlux2TransformerConfig(*config);
    (void)ditserve::models::qwenimage::ParseQwenImageTransformerConfig(*config);
  }
  // The same parsers on any JSON value (they are public and check is_object themselves).
  auto any = ditserve::ParseJsonObject(text);
  if (any.ok() && !any->is_object()) __builtin_trap();

  // Text-encoder and VAE config parsers (each takes the file's text).
  (void)ditserve::text::ParseCausalLmConfig(text, "config.json");
  (void)ditserve::text::ParseClipTextConfig(text);
  (void)ditserve::text::ParseT5Config(text);
  (void)ditserve::vae::ParseAutoencoderKLConfig(text);
  (void)ditserve::vae::ParseAutoencoderKLFlux2Config(text);
  (void)ditserve::vae::ParseAutoencoderKLQwenImageConfig(text);

  // A sharded checkpoint's index file.
  WriteFile(g_indexed + "/diffusion_pytorch_model.safetensors.index.json", bytes, size);
  auto ckpt = ditserve::sharding::ComponentCheckpoint::Open(g_indexed);
  if (ckpt.ok()) __builtin_trap();  // no shard exists, so it can never open
  return 0;
}
