// libFuzzer target: the JSON readers of a model folder, fed arbitrary text, from memory (nothing
// is written or read per input). Each input is parsed once as the file readers parse a file's
// text (ParseJsonObjectFile: nesting limit, JSON, object check; ReadJsonObjectFile is that after
// reading the file) and, when it is an object, checked as
//   - model_index.json of a pipeline root (ParsePipelineIndex, then ComponentDir of each entry:
//     what ReadPipelineIndex does after reading),
//   - config.json of a component folder (CheckComponentConfig: _class_name, quantization_config;
//     ReadComponentConfig's check), then parsed as every transformer config (FLUX.1, FLUX.2,
//     Qwen-Image) the way the loaders do,
//   - diffusion_pytorch_model.safetensors.index.json (ParseWeightMap: what
//     ComponentCheckpoint::Open does with the index it reads);
//   - preprocessor_config.json of a Qwen-Image-Edit processor/ (ParseQwen2VlImageConfig: what
//     LoadQwen2VlImageConfig does after reading; its result's invariants checked);
//   - every text-encoder and VAE config (CLIP, T5, the LLM encoders, the Qwen2.5-VL vision tower,
//     AutoencoderKL, AutoencoderKLFlux2, AutoencoderKLQwenImage) through its *FromJson entry
//     point, which is what its text parser runs after parsing.
// The text parsers add only the parse itself, of two kinds: ParseJsonObject (CLIP's stands for the
// six that use it) and AutoencoderKL's own; each runs once on the raw text. (Each text parser
// parsing the input again made 8 parses an input, most of a run's time.) What the file readers add
// around these (reading, symbolic-link checks, choosing the weights file) does not depend on the
// bytes and is covered by the unit tests. Every call must return a Status: no crash, no exception,
// no sanitizer report, no unbounded time or memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/config_json.h"
#include "models/flux1/flux1_config.h"
#include "models/flux2/flux2_config.h"
#include "models/qwenimage/qwenimage_config.h"
#include "models/text/causal_lm_config.h"
#include "models/text/qwen2_5_vl_vision_config.h"
#include "models/text/clip_text_config.h"
#include "models/text/t5_config.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/autoencoder_kl_flux2_config.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "sharding/model_json.h"
#include "pipeline/qwen2vl_processor_config.h"
#include "sharding/pipeline_index.h"

namespace {

void TransformerParsers(const nlohmann::json& config) {
  (void)ditserve::models::flux1::ParseFluxTransformerConfig(config);
  (void)ditserve::models::flux2::ParseFlux2TransformerConfig(config);
  (void)ditserve::models::qwenimage::ParseQwenImageTransformerConfig(config);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  auto json = ditserve::ParseJsonObjectFile(text, "/root/config.json");
  if (json.ok()) {
    if (!json->is_object()) __builtin_trap();
    // model_index.json.
    auto index = ditserve::sharding::ParsePipelineIndex(*json, "/root", "/root/model_index.json");
    if (index.ok()) {
      if (index->class_name.empty()) __builtin_trap();
      for (const auto& c : index->components) {
        if (c.name.empty() || !index->ComponentDir(c.name).ok()) __builtin_trap();
      }
    }
    // config.json of a transformer folder: the folder reader's check, then each parser.
    if (ditserve::sharding::CheckComponentConfig(*json, "/root/config.json").ok()) {
      TransformerParsers(*json);
    }
    // A sharded checkpoint's index file.
    auto weight_map = ditserve::sharding::ParseWeightMap(
        *json, "/root/diffusion_pytorch_model.safetensors.index.json");
    if (weight_map.ok() && weight_map->empty()) __builtin_trap();
    // A Qwen-Image-Edit processor's settings: what the image processor may rely on.
    auto processor =
        ditserve::pipeline::ParseQwen2VlImageConfig(*json, "/root/preprocessor_config.json");
    if (processor.ok()) {
      const auto& c = *processor;
      if (c.min_pixels < 1 || c.min_pixels > c.max_pixels || c.patch_size < 1 ||
          c.temporal_patch_size < 1 || c.merge_size < 1 || !(c.rescale_factor > 0)) {
        __builtin_trap();
      }
      for (double s : c.image_std) {
        if (s == 0) __builtin_trap();
      }
    }
    // Text-encoder and VAE configs, past their parse.
    (void)ditserve::text::CausalLmConfigFromJson(*json, "config.json");
    (void)ditserve::text::Qwen25VlVisionConfigFromJson(*json, "config.json");
    (void)ditserve::text::ClipTextConfigFromJson(*json);
    (void)ditserve::text::T5ConfigFromJson(*json);
    (void)ditserve::vae::AutoencoderKLConfigFromJson(*json);
    (void)ditserve::vae::AutoencoderKLFlux2ConfigFromJson(*json);
    (void)ditserve::vae::AutoencoderKLQwenImageConfigFromJson(*json);
  }

  // The text parsers' own parse, once of each kind.
  (void)ditserve::text::ParseClipTextConfig(text);
  (void)ditserve::vae::ParseAutoencoderKLConfig(text);
  return 0;
}
