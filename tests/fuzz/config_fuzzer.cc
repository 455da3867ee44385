// libFuzzer target: the JSON readers of a model folder, fed arbitrary text, from memory. Each
// input is parsed once (ParseJsonObject: nesting limit, object check) and, when it is an object,
// checked as
//   - model_index.json of a pipeline root (ParsePipelineIndex, then ComponentDir of each entry),
//   - config.json of a component folder (CheckComponentConfig: _class_name, quantization_config),
//     then parsed as every transformer config (FLUX.1, FLUX.2, Qwen-Image) the way the loaders do,
//   - diffusion_pytorch_model.safetensors.index.json (ParseWeightMap: the weight_map reader);
// and its text goes to every text-encoder and VAE config parser (CLIP, T5, the LLM encoders,
// AutoencoderKL, AutoencoderKLFlux2, AutoencoderKLQwenImage), which take the file's text.
// One input in 16 (by size, so the choice is part of the input) also goes through the real file
// readers (ReadPipelineIndex, ResolveComponentDir, ReadComponentConfig, ComponentCheckpoint::Open:
// written into a private temporary folder first), so the path a downloaded file takes stays
// fuzzed: writing three files per input made every input cost 1-2 ms. Every call must return a
// Status: no crash, no exception, no sanitizer report, no unbounded time or memory.
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
#include "sharding/model_json.h"
#include "sharding/pipeline_index.h"
#include "tests/fuzz/fuzz_workdir.h"

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

void TransformerParsers(const nlohmann::json& config) {
  (void)ditserve::models::flux1::ParseFluxTransformerConfig(config);
  (void)ditserve::models::flux2::ParseFlux2TransformerConfig(config);
  (void)ditserve::models::qwenimage::ParseQwenImageTransformerConfig(config);
}

// The real file readers on the input written as each file.
void ThroughFiles(const char* bytes, size_t size) {
  WriteFile(g_root + "/model_index.json", bytes, size);
  auto index = ditserve::sharding::ReadPipelineIndex(g_root);
  if (index.ok()) {
    for (const auto& c : index->components) {
      if (c.name.empty() || !index->ComponentDir(c.name).ok()) __builtin_trap();
    }
    (void)ditserve::sharding::ResolveComponentDir(g_root, "transformer");
  }
  WriteFile(g_component + "/config.json", bytes, size);
  auto config = ditserve::sharding::ReadComponentConfig(g_component);
  if (config.ok()) {
    if (!config->is_object()) __builtin_trap();
    TransformerParsers(*config);
  }
  WriteFile(g_indexed + "/diffusion_pytorch_model.safetensors.index.json", bytes, size);
  auto ckpt = ditserve::sharding::ComponentCheckpoint::Open(g_indexed);
  if (ckpt.ok()) __builtin_trap();  // no shard exists, so it can never open
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_root = ditserve_fuzz::MakeFuzzWorkdir("ditserve-config-fuzz");
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

  auto json = ditserve::ParseJsonObject(text);
  if (json.ok()) {
    if (!json->is_object()) __builtin_trap();
    // model_index.json.
    auto index = ditserve::sharding::ParsePipelineIndex(*json, "/root", "model_index.json");
    if (index.ok()) {
      if (index->class_name.empty()) __builtin_trap();
      for (const auto& c : index->components) {
        if (c.name.empty() || !index->ComponentDir(c.name).ok()) __builtin_trap();
      }
    }
    // config.json of a transformer folder: the folder reader's check, then each parser.
    if (ditserve::sharding::CheckComponentConfig(*json, "config.json").ok()) {
      TransformerParsers(*json);
    }
    // A sharded checkpoint's index file.
    auto weight_map = ditserve::sharding::ParseWeightMap(*json, "index.json");
    if (weight_map.ok() && weight_map->empty()) __builtin_trap();
  }

  // Text-encoder and VAE config parsers (each takes the file's text).
  (void)ditserve::text::ParseCausalLmConfig(text, "config.json");
  (void)ditserve::text::ParseClipTextConfig(text);
  (void)ditserve::text::ParseT5Config(text);
  (void)ditserve::vae::ParseAutoencoderKLConfig(text);
  (void)ditserve::vae::ParseAutoencoderKLFlux2Config(text);
  (void)ditserve::vae::ParseAutoencoderKLQwenImageConfig(text);

  if (size % 16 == 0) ThroughFiles(bytes, size);
  return 0;
}
