// libFuzzer target: ValidateRequest on any serialized ditserve.v1.GenerateRequest (what a client
// puts on the wire), against fixed model descriptions like the ones the frontend builds: a FLUX.1
// pipeline (text prompt, optional embeddings with a pooled part, three LoRA adapters) and an
// embeddings-only Qwen-Image transformer (text mask, latents out, no adapters), and models that
// take input images (FLUX.2-like references, FLUX.1 image to image, Kontext, Qwen-Image-Edit)
// under small image limits, so the images' checks, decoders and preparation (server/input_images,
// imaging/) run on every input that carries one. Inputs that do not parse are skipped, as gRPC would reject them. A
// valid result must satisfy the documented limits; an invalid one must be INVALID_ARGUMENT.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "ditserve/v1/ditserve.pb.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "server/request_validator.h"

namespace {

using ditserve::server::RequestLimits;
using ditserve::worker::v1::ModelDescription;
namespace v1 = ditserve::v1;

ModelDescription Flux1() {
  ModelDescription m;
  m.set_name("flux1-tiny");
  m.set_family("flux1");
  m.mutable_inputs()->set_accepts_text_prompt(true);
  for (int64_t d : {1, -1, 32}) m.mutable_inputs()->add_prompt_embeds_shape(d);
  for (int64_t d : {1, 32}) m.mutable_inputs()->add_pooled_prompt_embeds_shape(d);
  m.mutable_defaults()->set_height(256);
  m.mutable_defaults()->set_width(256);
  m.mutable_defaults()->set_num_inference_steps(28);
  m.mutable_defaults()->set_guidance_scale(3.5f);
  m.mutable_defaults()->set_max_sequence_length(512);
  // The step cache as the workers describe it, with a server default (so absent, present, 0 and
  // out-of-range thresholds all take their paths).
  m.mutable_step_cache()->set_method("first_block_cache");
  m.mutable_step_cache()->set_max_threshold(1.0);
  m.mutable_step_cache()->set_default_threshold(0.25);
  for (const char* name : {"style", "detail", "anime"}) {
    v1::LoraInfo* lora = m.add_loras();
    lora->set_name(name);
    lora->set_format("diffusers");
    lora->set_rank(4);
    lora->set_modules(10);
  }
  return m;
}

ModelDescription EmbeddingsOnly() {
  ModelDescription m;
  m.set_name("qwenimage-transformer");
  m.set_family("qwenimage");
  m.mutable_inputs()->set_requires_prompt_embeddings(true);
  for (int64_t d : {1, -1, 8}) m.mutable_inputs()->add_prompt_embeds_shape(d);
  m.mutable_inputs()->set_accepts_text_mask(true);
  m.mutable_inputs()->add_output_formats(v1::OUTPUT_FORMAT_LATENTS);
  m.mutable_defaults()->set_height(64);
  m.mutable_defaults()->set_width(64);
  m.mutable_defaults()->set_num_inference_steps(4);
  m.mutable_defaults()->set_true_cfg_scale(4.0f);
  m.mutable_defaults()->set_max_sequence_length(512);
  return m;
}

// A FLUX.1 description that takes input images as `use` says (small areas: the preparation's
// resizes stay cheap).
ModelDescription WithImages(const char* use) {
  ModelDescription m = Flux1();
  v1::ImageInputs* in = m.mutable_inputs()->mutable_image_inputs();
  in->set_use(use);
  in->set_size_multiple(16);
  if (std::string(use) == "reference") {
    in->set_max_images(3);
    in->set_min_side(8);
    in->set_max_aspect_ratio(8);
    in->set_max_area(64 * 64);
  } else if (std::string(use) == "qwen_edit") {
    in->set_max_images(3);
    in->set_min_images(1);
    in->set_max_aspect_ratio(100);
    in->set_condition_area(384 * 384);
  } else {
    in->set_max_images(1);
    in->set_min_side(std::string(use) == "kontext" ? 16 : 1);
    in->set_default_strength(0.6);
  }
  return m;
}

// The images of a valid result: as many as sent, each exactly its size's bytes; references and
// Kontext inputs at multiples of 16 (Kontext: a preferred resolution), image-to-image inputs at
// the output's size; strength in (0, 1] for image to image with an image, else 0.
void CheckImages(const v1::GenerateRequest& request, const ModelDescription& model,
                 const ditserve::server::ValidatedRequest& v) {
  const v1::ImageInputs& in = model.inputs().image_inputs();
  const auto& images = v.item.images();
  if (images.size() != request.images_size() || v.shape.input_images != uint32_t(images.size())) {
    __builtin_trap();
  }
  if (static_cast<uint32_t>(images.size()) > in.max_images()) __builtin_trap();
  if (static_cast<uint32_t>(images.size()) < in.min_images()) __builtin_trap();
  // qwen_edit: one condition image per image, sides multiples of 32 (calculate_dimensions);
  // other uses: none.
  const auto& conditions = v.item.condition_images();
  if (in.use() == "qwen_edit" ? conditions.size() != images.size() : !conditions.empty()) {
    __builtin_trap();
  }
  for (const auto& px : conditions) {
    if (px.width() == 0 || px.height() == 0 || px.width() % 32 || px.height() % 32) __builtin_trap();
    if (px.rgb().size() != uint64_t{px.width()} * px.height() * 3) __builtin_trap();
  }
  for (const auto& px : images) {
    if (px.width() == 0 || px.height() == 0) __builtin_trap();
    if (px.rgb().size() != uint64_t{px.width()} * px.height() * 3) __builtin_trap();
    if (in.use() == "image_to_image") {
      if (px.width() != v.shape.width || px.height() != v.shape.height) __builtin_trap();
    } else if (px.width() % 16 || px.height() % 16) {
      __builtin_trap();
    }
    if (in.use() == "reference" && uint64_t{px.width()} * px.height() > in.max_area())
      __builtin_trap();
  }
  const double s = v.item.strength();
  if (in.use() == "image_to_image" && !images.empty()) {
    if (!(s > 0 && s <= 1)) __builtin_trap();
  } else if (s != 0) {
    __builtin_trap();
  }
  if (v.shape.preview_images > 3) __builtin_trap();
}

void Check(const v1::GenerateRequest& request, const ModelDescription& model,
           const RequestLimits& limits) {
  auto v = ditserve::server::ValidateRequest(request, model, limits);
  if (!v.ok()) {
    if (v.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return;
  }
  const auto& s = v->shape;
  if (s.height % limits.size_multiple || s.height < limits.size_multiple ||
      s.height > limits.max_height) {
    __builtin_trap();
  }
  if (s.width % limits.size_multiple || s.width < limits.size_multiple ||
      s.width > limits.max_width) {
    __builtin_trap();
  }
  if (s.steps < limits.min_steps || s.steps > limits.max_steps) __builtin_trap();
  if (s.max_sequence_length < 1 || s.max_sequence_length > limits.max_sequence_length) {
    __builtin_trap();
  }
  if (s.uses_embeddings &&
      (s.embeddings_length < 1 || s.embeddings_length > limits.max_sequence_length)) {
    __builtin_trap();
  }
  const float g = v->item.guidance_scale();
  if (!std::isfinite(g) || g < limits.min_guidance || g > limits.max_guidance) __builtin_trap();
  const float cfg = v->item.true_cfg_scale();
  if (!std::isfinite(cfg) || cfg < 0 || cfg > limits.max_true_cfg) __builtin_trap();
  if (v->item.prompt().size() > limits.max_prompt_bytes) __builtin_trap();
  if (v->item.request_id().size() > limits.max_request_id_bytes) __builtin_trap();
  if (!v1::OutputFormat_IsValid(s.output_format) ||
      s.output_format == v1::OUTPUT_FORMAT_UNSPECIFIED) {
    __builtin_trap();
  }
  // LoRA choices: loaded names, each once, sorted, every scale set and within the limit, the same
  // in the item and the shape.
  const auto& loras = v->item.loras();
  if (static_cast<uint64_t>(loras.size()) > limits.max_loras_per_request) __builtin_trap();
  if (static_cast<size_t>(loras.size()) != s.loras.size()) __builtin_trap();
  std::set<std::string> loaded;
  for (const auto& l : model.loras()) loaded.insert(l.name());
  for (int i = 0; i < loras.size(); ++i) {
    const v1::LoraChoice& c = loras.Get(i);
    if (!loaded.count(c.name()) || !c.has_scale()) __builtin_trap();
    if (!std::isfinite(c.scale()) ||
        std::fabs(c.scale()) > static_cast<float>(limits.max_lora_scale)) {
      __builtin_trap();
    }
    if (i > 0 && !(loras.Get(i - 1).name() < c.name())) __builtin_trap();
    if (s.loras[i].first != c.name() || s.loras[i].second != c.scale()) __builtin_trap();
  }
  // The step cache: finite, within the model's bound, the default when absent; on means alone.
  const double t = s.cache_threshold;
  if (!std::isfinite(t) || t < 0 || t > model.step_cache().max_threshold()) __builtin_trap();
  if (!request.has_cache_threshold() && t != model.step_cache().default_threshold()) {
    __builtin_trap();
  }
  if (t > 0 && s.batchable()) __builtin_trap();
  CheckImages(request, model, *v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelDescription* const flux1 = new ModelDescription(Flux1());
  static const ModelDescription* const embeddings_only = new ModelDescription(EmbeddingsOnly());
  static const RequestLimits* const limits = new RequestLimits();
  static const ModelDescription* const reference = new ModelDescription(WithImages("reference"));
  static const ModelDescription* const image_to_image =
      new ModelDescription(WithImages("image_to_image"));
  static const ModelDescription* const kontext = new ModelDescription(WithImages("kontext"));
  static const ModelDescription* const qwen_edit = new ModelDescription(WithImages("qwen_edit"));
  // Small image limits: a header claiming more is refused before any decoder runs.
  static const RequestLimits* const image_limits = [] {
    auto* l = new RequestLimits();
    l->max_input_image_bytes = 1 << 16;
    l->max_input_image_side = 256;
    l->max_input_image_pixels = 128 * 128;
    return l;
  }();
  v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  Check(request, *flux1, *limits);
  Check(request, *embeddings_only, *limits);
  if (request.images_size() > 0 || request.strength() != 0) {
    Check(request, *reference, *image_limits);
    Check(request, *image_to_image, *image_limits);
    Check(request, *kontext, *image_limits);
    Check(request, *qwen_edit, *image_limits);
  }
  return 0;
}
