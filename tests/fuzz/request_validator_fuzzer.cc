// libFuzzer target: ValidateRequest on any serialized ditserve.v1.GenerateRequest (what a client
// puts on the wire), against fixed model descriptions like the ones the frontend builds: a FLUX.1
// pipeline (text prompt, optional embeddings with a pooled part, three LoRA adapters) and an
// embeddings-only Qwen-Image transformer (text mask, latents out, no adapters). Inputs that do not parse are skipped, as gRPC would reject
// them. A valid result must satisfy the documented limits; an invalid one must be INVALID_ARGUMENT.
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
  if (s.width % limits.size_multiple || s.width < limits.size_multiple || s.width > limits.max_width) {
    __builtin_trap();
  }
  if (s.steps < limits.min_steps || s.steps > limits.max_steps) __builtin_trap();
  if (s.max_sequence_length < 1 || s.max_sequence_length > limits.max_sequence_length) {
    __builtin_trap();
  }
  if (s.uses_embeddings && (s.embeddings_length < 1 || s.embeddings_length > limits.max_sequence_length)) {
    __builtin_trap();
  }
  const float g = v->item.guidance_scale();
  if (!std::isfinite(g) || g < limits.min_guidance || g > limits.max_guidance) __builtin_trap();
  const float cfg = v->item.true_cfg_scale();
  if (!std::isfinite(cfg) || cfg < 0 || cfg > limits.max_true_cfg) __builtin_trap();
  if (v->item.prompt().size() > limits.max_prompt_bytes) __builtin_trap();
  if (v->item.request_id().size() > limits.max_request_id_bytes) __builtin_trap();
  if (!v1::OutputFormat_IsValid(s.output_format) || s.output_format == v1::OUTPUT_FORMAT_UNSPECIFIED) {
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
    if (!std::isfinite(c.scale()) || std::fabs(c.scale()) > static_cast<float>(limits.max_lora_scale)) {
      __builtin_trap();
    }
    if (i > 0 && !(loras.Get(i - 1).name() < c.name())) __builtin_trap();
    if (s.loras[i].first != c.name() || s.loras[i].second != c.scale()) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelDescription* const flux1 = new ModelDescription(Flux1());
  static const ModelDescription* const embeddings_only = new ModelDescription(EmbeddingsOnly());
  static const RequestLimits* const limits = new RequestLimits();
  v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  Check(request, *flux1, *limits);
  Check(request, *embeddings_only, *limits);
  return 0;
}
