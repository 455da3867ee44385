#include "worker/job_codec.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "worker/image_output.h"
#include "worker/tensor_proto.h"

namespace ditserve::worker {
namespace {

absl::StatusOr<pipeline::PromptEmbeddings> EmbeddingsFromProto(
    const ditserve::v1::PromptEmbeddings& p, const std::string& field) {
  pipeline::PromptEmbeddings e;
  ASSIGN_OR_RETURN(e.prompt_embeds, TensorFromProto(p.prompt_embeds(), field + ".prompt_embeds"));
  if (p.has_pooled_prompt_embeds()) {
    ASSIGN_OR_RETURN(e.pooled_prompt_embeds,
                     TensorFromProto(p.pooled_prompt_embeds(), field + ".pooled_prompt_embeds"));
  }
  if (p.has_text_mask()) {
    ASSIGN_OR_RETURN(e.text_mask, TensorFromProto(p.text_mask(), field + ".text_mask"));
  }
  return e;
}

// The generation parameters a PNG carries as tEXt chunks.
std::vector<std::pair<std::string, std::string>> PngText(const v1::RunRequest& request,
                                                         const v1::RunItem& item,
                                                         const std::string& model) {
  std::vector<std::pair<std::string, std::string>> text = {
      {"Software", absl::StrCat("ditserve ", DITSERVE_VERSION)},
      {"Model", model},
      {"Prompt", item.prompt()},
      {"Seed", std::to_string(item.seed())},
      {"Steps", std::to_string(request.num_inference_steps())},
      {"Guidance", absl::StrFormat("%g", item.guidance_scale())},
      {"Size", absl::StrCat(request.width(), "x", request.height())}};
  if (!item.prompt_2().empty() && item.prompt_2() != item.prompt()) {
    text.emplace_back("Prompt 2", item.prompt_2());
  }
  for (const ditserve::v1::LoraChoice& c : item.loras()) {
    text.emplace_back("LoRA", absl::StrFormat("%s:%g", c.name(), c.has_scale() ? c.scale() : 1.0f));
  }
  if (item.true_cfg_scale() > 1.0f) {
    text.emplace_back("Negative prompt", item.negative_prompt());
    text.emplace_back("True CFG scale", absl::StrFormat("%g", item.true_cfg_scale()));
  }
  return text;
}

// RunItem.images[j] (or condition_images[j]) as a uint8 (H, W, 3) CPU tensor, its size checked
// against its bytes.
absl::StatusOr<torch::Tensor> ImageFromProto(const v1::RgbPixels& p, const std::string& field) {
  const uint64_t expected = uint64_t{p.width()} * p.height() * 3;
  if (p.width() == 0 || p.height() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", p.width(), "x", p.height(), ", an empty image"));
  }
  if (p.rgb().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".rgb holds ", p.rgb().size(),
                                                   " bytes; a ", p.width(), "x", p.height(),
                                                   " RGB image needs ", expected));
  }
  // Runs on RPC handler threads: an allocation failure is a Status, not an exception.
  return GuardTorch("decoding an input image", [&] {
    torch::Tensor t = torch::empty(
        {static_cast<int64_t>(p.height()), static_cast<int64_t>(p.width()), 3}, torch::kUInt8);
    std::memcpy(t.data_ptr(), p.rgb().data(), p.rgb().size());
    return t;
  });
}

// ModelInfo.inputs.image_inputs.use for a card's ImageUse ("" for kNone).
const char* ImageUseName(pipeline::ImageUse use) {
  switch (use) {
    case pipeline::ImageUse::kReference:
      return "reference";
    case pipeline::ImageUse::kImageToImage:
      return "image_to_image";
    case pipeline::ImageUse::kKontext:
      return "kontext";
    case pipeline::ImageUse::kQwenEdit:
      return "qwen_edit";
    case pipeline::ImageUse::kNone:
      break;
  }
  return "";
}

void DescribeImageInputs(const pipeline::ImageInputCard& card, ditserve::v1::ImageInputs* out) {
  if (card.use == pipeline::ImageUse::kNone || card.max_images <= 0) return;  // takes none
  out->set_max_images(static_cast<uint32_t>(card.max_images));
  out->set_min_images(static_cast<uint32_t>(std::max(card.min_images, 0)));
  out->set_condition_area(static_cast<uint64_t>(std::max<int64_t>(card.condition_area, 0)));
  out->set_use(ImageUseName(card.use));
  out->set_min_side(static_cast<uint32_t>(card.min_side));
  out->set_max_aspect_ratio(static_cast<uint32_t>(card.max_aspect_ratio));
  out->set_max_area(static_cast<uint64_t>(card.max_area));
  out->set_size_multiple(static_cast<uint32_t>(card.size_multiple));
  out->set_default_strength(card.default_strength);
}

// `value` parsed by `parse` (a common/model_flags.h parser), or `fallback` when it is empty.
template <typename E, typename Parse>
absl::StatusOr<E> ParseOr(const std::string& value, E fallback, Parse parse,
                          absl::string_view field) {
  if (value.empty()) return fallback;
  return parse(value, field);
}

// The job-wide settings of a RunRequest (everything but its items), bounds checked.
absl::Status JobSettingsFromRunRequest(const v1::RunRequest& request,
                                       pipeline::GenerationJob* job) {
  job->height = request.height();
  job->width = request.width();
  job->num_inference_steps = request.num_inference_steps();
  job->max_sequence_length = request.max_sequence_length();
  job->output = request.output_format() == ditserve::v1::OUTPUT_FORMAT_LATENTS
                    ? pipeline::JobOutput::kLatents
                    : pipeline::JobOutput::kImage;
  if (request.preview_images() >
      static_cast<uint32_t>(pipeline::GenerationJob::kMaxPreviewImages)) {
    return absl::InvalidArgumentError(absl::StrCat("preview_images ", request.preview_images(),
                                                   " is over ",
                                                   pipeline::GenerationJob::kMaxPreviewImages));
  }
  job->preview_images = static_cast<int>(request.preview_images());
  // NaN fails both comparisons.
  const double threshold = request.cache_threshold();
  if (!(threshold >= 0 && threshold <= pipeline::GenerationJob::kMaxCacheThreshold)) {
    return absl::InvalidArgumentError(absl::StrCat("cache_threshold must be in 0..",
                                                   pipeline::GenerationJob::kMaxCacheThreshold,
                                                   ", got ", threshold));
  }
  job->cache_threshold = threshold;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<pipeline::GenerationJob> JobFromRunRequest(const v1::RunRequest& request) {
  pipeline::GenerationJob job;
  RETURN_IF_ERROR(JobSettingsFromRunRequest(request, &job));
  for (int i = 0; i < request.items_size(); ++i) {
    const v1::RunItem& in = request.items(i);
    pipeline::JobItem item;
    item.prompt = in.prompt();
    item.prompt_2 = in.prompt_2();
    item.negative_prompt = in.negative_prompt();
    item.negative_prompt_2 = in.negative_prompt_2();
    item.seed = in.seed();
    item.guidance_scale = in.guidance_scale();
    item.true_cfg_scale = in.true_cfg_scale();
    if (in.has_prompt_embeddings()) {
      ASSIGN_OR_RETURN(item.embeddings,
                       EmbeddingsFromProto(in.prompt_embeddings(), "prompt_embeddings"));
    }
    if (in.has_negative_prompt_embeddings()) {
      ASSIGN_OR_RETURN(
          item.negative_embeddings,
          EmbeddingsFromProto(in.negative_prompt_embeddings(), "negative_prompt_embeddings"));
    }
    for (int j = 0; j < in.images_size(); ++j) {
      ASSIGN_OR_RETURN(
          torch::Tensor image,
          ImageFromProto(in.images(j), absl::StrCat("items[", i, "].images[", j, "]")));
      item.images.push_back(std::move(image));
    }
    // qwen_edit: one condition image per image, or none at all.
    if (in.condition_images_size() != 0 && in.condition_images_size() != in.images_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("items[", i, "].condition_images holds ", in.condition_images_size(),
                       " images but items[", i, "].images holds ", in.images_size(),
                       ": one condition image per image, in order, or none"));
    }
    for (int j = 0; j < in.condition_images_size(); ++j) {
      ASSIGN_OR_RETURN(torch::Tensor image,
                       ImageFromProto(in.condition_images(j),
                                      absl::StrCat("items[", i, "].condition_images[", j, "]")));
      item.condition_images.push_back(std::move(image));
    }
    item.strength = in.strength();
    // LoRA choices are the job's: the frontend batches only requests that agree on them.
    std::vector<lora::LoraChoice> loras;
    for (const ditserve::v1::LoraChoice& c : in.loras()) {
      loras.push_back({c.name(), c.has_scale() ? c.scale() : 1.0f});
    }
    if (i == 0) {
      job.loras = std::move(loras);
    } else if (loras != job.loras) {
      return absl::InvalidArgumentError(absl::StrCat(
          "items[", i, "].loras differ from items[0].loras; such requests cannot share a job"));
    }
    job.items.push_back(std::move(item));
  }
  return job;
}

absl::StatusOr<v1::RunResult> RunResultFromGeneration(const v1::RunRequest& request,
                                                      const pipeline::GenerationResult& result,
                                                      const pipeline::ModelCard& card) {
  v1::RunResult out;
  out.set_encode_seconds(result.seconds.encode);
  out.set_denoise_seconds(result.seconds.denoise);
  out.set_decode_seconds(result.seconds.decode);
  out.set_full_steps(result.full_steps);  // every rank counts the same
  out.set_cached_steps(result.cached_steps);
  const bool latents = request.output_format() == ditserve::v1::OUTPUT_FORMAT_LATENTS;
  const size_t produced = latents ? result.latents.size() : result.images.size();
  if (produced == 0) return out;  // not rank 0
  if (produced != static_cast<size_t>(request.items_size())) {
    return absl::InternalError(absl::StrCat("the pipeline returned ", produced, " outputs for ",
                                            request.items_size(), " items"));
  }
  const auto format = request.output_format() == ditserve::v1::OUTPUT_FORMAT_UNSPECIFIED
                          ? ditserve::v1::OUTPUT_FORMAT_PNG
                          : request.output_format();
  for (int i = 0; i < request.items_size(); ++i) {
    const v1::RunItem& item = request.items(i);
    v1::RunOutput* r = out.add_outputs();
    if (latents) {
      ASSIGN_OR_RETURN(*r->mutable_latents(), GuardTorch("encoding latents", [&] {
        return TensorToProto(result.latents[i]);
      }));
      continue;
    }
    ASSIGN_OR_RETURN(std::string bytes,
                     EncodeImage(result.images[i], format, PngText(request, item, card.name),
                                 request.output_quality()));
    r->set_image(std::move(bytes));
  }
  return out;
}

v1::RunEvent RunEventFromStep(const pipeline::StepEvent& step) {
  v1::RunEvent ev;
  v1::StepProgress* p = ev.mutable_progress();
  p->set_step(step.step);
  p->set_total_steps(step.total);
  p->set_step_seconds(step.seconds);
  if (step.previews.empty()) return ev;
  // A preview that cannot be encoded is dropped, not the step's progress (previews never fail a
  // job).
  std::vector<std::string> pngs;
  for (const torch::Tensor& image : step.previews) {
    absl::StatusOr<std::string> png = EncodeImage(image, ditserve::v1::OUTPUT_FORMAT_PNG, {});
    if (!png.ok()) return ev;
    pngs.push_back(*std::move(png));
  }
  for (std::string& png : pngs) p->add_previews(std::move(png));
  p->set_preview_index(static_cast<uint32_t>(std::max(step.preview_index, 0)));
  return ev;
}

absl::StatusOr<InitConfig> InitConfigFromRequest(const v1::InitRequest& request) {
  InitConfig c;
  c.rank = request.rank();
  c.rendezvous = RendezvousFromProto(request.rendezvous());
  c.model_dir = request.model_dir();
  ASSIGN_OR_RETURN(c.device,
                   ParseOr(request.device(), DeviceKind::kCpu, ParseDeviceKind, "device"));
  ASSIGN_OR_RETURN(c.dtype,
                   ParseOr(request.dtype(), ModelDtype::kFloat32, ParseModelDtype, "dtype"));
  ASSIGN_OR_RETURN(c.text_encoder_placement,
                   ParseOr(request.text_encoder_placement(), TextEncoderPlacement::kAuto,
                           ParseTextEncoderPlacement, "text_encoder_placement"));
  ASSIGN_OR_RETURN(c.lora_mode,
                   ParseOr(request.lora_mode(), LoraMode::kMerge, ParseLoraMode, "lora_mode"));
  if (!request.weights().empty()) {
    ASSIGN_OR_RETURN(c.weights, ParseWeightFormat(request.weights()));
  }
  if (request.has_cuda_graphs()) {
    if (request.cuda_graphs() > kMaxCudaGraphs) {
      return absl::InvalidArgumentError(absl::StrCat("cuda_graphs must be in 0..", kMaxCudaGraphs,
                                                     ", got ", request.cuda_graphs()));
    }
    c.cuda_graphs = request.cuda_graphs();
  }
  c.staging_buffer_bytes = request.staging_buffer_bytes();
  c.collective_timeout_ms = request.collective_timeout_ms();
  c.replicate_modulation = request.replicate_modulation();
  c.warmup = request.warmup();
  c.warmup_height = request.warmup_height();
  c.warmup_width = request.warmup_width();
  for (const v1::LoraAdapter& l : request.loras()) c.loras.push_back({l.name(), l.path()});
  c.lora_merge_max_bytes = request.lora_merge_max_bytes();
  return c;
}

v1::InitEvent InitEventFromProgress(const InitProgress& progress) {
  v1::InitEvent ev;
  switch (progress.phase) {
    case InitPhase::kGroup:
      ev.set_phase("group");
      break;
    case InitPhase::kLoad:
      ev.set_phase("load");
      ev.set_bytes_loaded(progress.bytes_loaded);
      ev.set_bytes_total(progress.bytes_total);
      break;
    case InitPhase::kWarmup:
      ev.set_phase("warmup");
      break;
  }
  return ev;
}

v1::InitEvent ReadyEvent(const InitReport& report) {
  v1::InitEvent ev;
  ev.set_phase("ready");
  *ev.mutable_model() = DescribeModel(report.card, report.world_size, report.weight_bytes);
  return ev;
}

GroupRendezvous RendezvousFromProto(const v1::Rendezvous& proto) {
  GroupRendezvous r;
  r.world_size = proto.world_size();
  r.nccl_unique_id = proto.nccl_unique_id();
  r.store_host = proto.store_host();
  r.store_port = proto.store_port();
  r.group_id = proto.group_id();
  return r;
}

v1::Rendezvous RendezvousToProto(const GroupRendezvous& rendezvous) {
  v1::Rendezvous r;
  r.set_world_size(rendezvous.world_size);
  r.set_nccl_unique_id(rendezvous.nccl_unique_id);
  r.set_store_host(rendezvous.store_host);
  r.set_store_port(rendezvous.store_port);
  r.set_group_id(rendezvous.group_id);
  return r;
}

v1::WorkerStatus WorkerStatusToProto(const EngineStatus& status) {
  v1::WorkerStatus s;
  s.set_rank(status.rank);
  s.set_ready(status.ready);
  s.set_resident_bytes(status.resident_bytes);
  s.set_steps(status.steps);
  s.set_step_seconds_sum(status.step_seconds_sum);
  s.set_cuda_graph_replays(status.cuda_graph_replays);
  s.set_cuda_graph_captures(status.cuda_graph_captures);
  s.set_cached_steps(status.cached_steps);
  s.mutable_memory()->set_allocated_bytes(status.memory.allocated);
  s.mutable_memory()->set_reserved_bytes(status.memory.reserved);
  s.mutable_memory()->set_peak_allocated_bytes(status.memory.peak_allocated);
  s.mutable_memory()->set_total_bytes(status.memory.total);
  s.set_weight_bytes(status.weight_bytes);
  s.set_load_seconds(status.load_seconds);
  s.set_allreduce_count(status.comm.allreduce_count);
  s.set_allreduce_bytes(status.comm.allreduce_bytes);
  s.set_allreduce_seconds(status.comm.allreduce_seconds);
  return s;
}

v1::ModelDescription DescribeModel(const pipeline::ModelCard& card, uint32_t tp_degree,
                                   uint64_t weight_bytes) {
  v1::ModelDescription d;
  d.set_name(card.name);
  d.set_family(card.family);
  d.set_tp_degree(tp_degree);
  d.set_dtype(card.dtype);
  d.set_device(card.device);
  d.set_guidance_distilled(card.guidance_distilled);
  d.set_weight_bytes(weight_bytes);
  auto* in = d.mutable_inputs();
  in->set_accepts_text_prompt(card.accepts_text_prompt);
  in->set_requires_prompt_embeddings(card.requires_prompt_embeddings);
  for (int64_t v : card.prompt_embeds_shape) in->add_prompt_embeds_shape(v);
  for (int64_t v : card.pooled_prompt_embeds_shape) in->add_pooled_prompt_embeds_shape(v);
  in->set_accepts_text_mask(card.accepts_text_mask);
  if (!card.images_out) in->add_output_formats(ditserve::v1::OUTPUT_FORMAT_LATENTS);
  DescribeImageInputs(card.image_inputs, in->mutable_image_inputs());
  auto* def = d.mutable_defaults();
  def->set_height(static_cast<uint32_t>(card.default_height));
  def->set_width(static_cast<uint32_t>(card.default_width));
  def->set_num_inference_steps(static_cast<uint32_t>(card.default_steps));
  def->set_guidance_scale(card.default_guidance_scale);
  def->set_true_cfg_scale(card.default_true_cfg_scale);
  for (const lora::LoraCard& l : card.loras) {
    ditserve::v1::LoraInfo* info = d.add_loras();
    info->set_name(l.name);
    info->set_format(l.format);
    info->set_rank(static_cast<uint32_t>(l.rank));
    info->set_modules(static_cast<uint32_t>(l.modules));
  }
  def->set_max_sequence_length(static_cast<uint32_t>(card.default_max_sequence_length));
  if (card.max_cache_threshold > 0) {  // the frontend sets default_threshold (its flag)
    d.mutable_step_cache()->set_method(kFirstBlockCacheMethod);
    d.mutable_step_cache()->set_max_threshold(card.max_cache_threshold);
  }
  return d;
}

}  // namespace ditserve::worker
