#include "server/request_validator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ditserve::server {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    if (len == 0 || i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += len;
  }
  return true;
}

absl::Status CheckText(const std::string& field, const std::string& text, uint64_t max_bytes) {
  if (text.size() > max_bytes) {
    return Invalid(
        absl::StrCat(field, " is ", text.size(), " bytes; the limit is ", max_bytes, " bytes"));
  }
  if (!IsValidUtf8(text)) return Invalid(absl::StrCat(field, " is not valid UTF-8"));
  return absl::OkStatus();
}

absl::Status CheckSize(const std::string& field, uint32_t value, const RequestLimits& limits,
                       uint64_t max) {
  if (value % limits.size_multiple != 0 || value < limits.size_multiple || value > max) {
    return Invalid(absl::StrCat(field, " must be a multiple of ", limits.size_multiple, " in ",
                                limits.size_multiple, "..", max, ", got ", value));
  }
  return absl::OkStatus();
}

// Checks one tensor against an expected shape (-1 = any size up to `max_any`).
absl::Status CheckTensor(const std::string& field, const v1::Tensor& t,
                         const google::protobuf::RepeatedField<int64_t>& expected,
                         int64_t max_any) {
  if (t.dtype() != v1::DTYPE_FLOAT32) {
    return Invalid(absl::StrCat(field, ".dtype must be DTYPE_FLOAT32"));
  }
  if (t.shape_size() != expected.size()) {
    return Invalid(absl::StrCat(field, ".shape must have ", expected.size(), " dimensions, got ",
                                t.shape_size()));
  }
  uint64_t numel = 1;
  for (int i = 0; i < t.shape_size(); ++i) {
    const int64_t d = t.shape(i);
    const int64_t e = expected.Get(i);
    if (e >= 0 && d != e) {
      return Invalid(absl::StrCat(field, ".shape[", i, "] must be ", e, ", got ", d));
    }
    if (e < 0 && (d < 1 || d > max_any)) {
      return Invalid(absl::StrCat(field, ".shape[", i, "] must be in 1..", max_any, ", got ", d));
    }
    numel *= static_cast<uint64_t>(d);
  }
  if (t.data().size() != numel * 4) {
    return Invalid(absl::StrCat(field, ".data must hold ", numel * 4, " bytes (", numel,
                                " float32), got ", t.data().size()));
  }
  const float* f = reinterpret_cast<const float*>(t.data().data());
  for (uint64_t i = 0; i < numel; ++i) {
    if (!std::isfinite(f[i])) return Invalid(absl::StrCat(field, ".data contains NaN or Inf"));
  }
  return absl::OkStatus();
}

absl::Status CheckEmbeddings(const std::string& field, const v1::PromptEmbeddings& e,
                             const v1::InputSpec& spec, uint64_t max_seq) {
  if (!e.has_prompt_embeds()) return Invalid(absl::StrCat(field, ".prompt_embeds is required"));
  RETURN_IF_ERROR(CheckTensor(field + ".prompt_embeds", e.prompt_embeds(),
                              spec.prompt_embeds_shape(), static_cast<int64_t>(max_seq)));
  if (spec.pooled_prompt_embeds_shape_size() > 0) {
    if (!e.has_pooled_prompt_embeds()) {
      return Invalid(absl::StrCat(field, ".pooled_prompt_embeds is required by this model"));
    }
    RETURN_IF_ERROR(CheckTensor(field + ".pooled_prompt_embeds", e.pooled_prompt_embeds(),
                                spec.pooled_prompt_embeds_shape(), 0));
  } else if (e.has_pooled_prompt_embeds()) {
    return Invalid(absl::StrCat(field, ".pooled_prompt_embeds is not used by this model"));
  }
  if (e.has_text_mask()) {
    if (!spec.accepts_text_mask()) {
      return Invalid(absl::StrCat(field, ".text_mask is not used by this model"));
    }
    google::protobuf::RepeatedField<int64_t> mask_shape;
    mask_shape.Add(1);
    mask_shape.Add(e.prompt_embeds().shape(1));
    RETURN_IF_ERROR(CheckTensor(field + ".text_mask", e.text_mask(), mask_shape, 0));
    const float* m = reinterpret_cast<const float*>(e.text_mask().data().data());
    for (int64_t i = 0; i < e.prompt_embeds().shape(1); ++i) {
      if (m[i] != 0.0f && m[i] != 1.0f) {
        return Invalid(absl::StrCat(field, ".text_mask values must be 0 or 1"));
      }
    }
  }
  return absl::OkStatus();
}

// A name from a request, for messages: escaped, and cut when long.
std::string Quoted(const std::string& name) {
  constexpr size_t kShown = 64;
  const bool cut = name.size() > kShown;
  return absl::StrCat("'", absl::CHexEscape(cut ? name.substr(0, kShown) : name),
                      cut ? "...'" : "'");
}

// The request's LoRA choices, checked against the loaded adapters and sorted by name.
absl::StatusOr<std::vector<std::pair<std::string, float>>> CheckLoras(
    const v1::GenerateRequest& r, const worker::v1::ModelDescription& model,
    const RequestLimits& limits) {
  std::vector<std::pair<std::string, float>> out;
  if (r.loras_size() == 0) return out;
  if (static_cast<uint64_t>(r.loras_size()) > limits.max_loras_per_request) {
    return Invalid(absl::StrCat("loras has ", r.loras_size(), " entries; the limit is ",
                                limits.max_loras_per_request, " per request"));
  }
  std::vector<std::string> loaded;
  for (const v1::LoraInfo& info : model.loras()) loaded.push_back(info.name());
  std::sort(loaded.begin(), loaded.end());
  std::map<std::string, int> seen;  // name -> index
  // As ModelInfo publishes it: a client may send exactly the published limit.
  const float max_scale = static_cast<float>(limits.max_lora_scale);
  for (int i = 0; i < r.loras_size(); ++i) {
    const v1::LoraChoice& c = r.loras(i);
    const std::string field = absl::StrCat("loras[", i, "]");
    if (c.name().empty()) return Invalid(absl::StrCat(field, ".name is required"));
    if (!std::binary_search(loaded.begin(), loaded.end(), c.name())) {
      return Invalid(absl::StrCat(field, ".name: no adapter named ", Quoted(c.name()), "; loaded: ",
                                  loaded.empty()
                                      ? "none (the server was started without --lora or --lora-dir)"
                                      : absl::StrJoin(loaded, ", ")));
    }
    if (auto [it, inserted] = seen.emplace(c.name(), i); !inserted) {
      return Invalid(absl::StrCat(field, ".name: ", Quoted(c.name()),
                                  " is already chosen by loras[", it->second, "]"));
    }
    const float scale = c.has_scale() ? c.scale() : 1.0f;
    if (!std::isfinite(scale) || std::fabs(scale) > max_scale) {
      return Invalid(
          absl::StrCat(field, ".scale must be in -", max_scale, "..", max_scale, ", got ", scale));
    }
    out.emplace_back(c.name(), scale);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The four texts and request_id.
absl::Status CheckTexts(const v1::GenerateRequest& r, const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckText("prompt", r.prompt(), limits.max_prompt_bytes));
  RETURN_IF_ERROR(CheckText("prompt_2", r.prompt_2(), limits.max_prompt_bytes));
  RETURN_IF_ERROR(CheckText("negative_prompt", r.negative_prompt(), limits.max_prompt_bytes));
  RETURN_IF_ERROR(CheckText("negative_prompt_2", r.negative_prompt_2(), limits.max_prompt_bytes));
  if (r.request_id().size() > limits.max_request_id_bytes) {
    return Invalid(absl::StrCat("request_id is ", r.request_id().size(), " bytes; the limit is ",
                                limits.max_request_id_bytes));
  }
  for (char c : r.request_id()) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return Invalid("request_id must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

// Text conditioning: a prompt for models with built-in encoders, embeddings otherwise.
absl::Status CheckConditioning(const v1::GenerateRequest& r,
                               const worker::v1::ModelDescription& model,
                               const RequestLimits& limits) {
  const v1::InputSpec& spec = model.inputs();
  if (r.has_prompt_embeddings()) {
    const uint64_t max_seq = limits.max_sequence_length;
    RETURN_IF_ERROR(CheckEmbeddings("prompt_embeddings", r.prompt_embeddings(), spec, max_seq));
    if (r.has_negative_prompt_embeddings()) {
      RETURN_IF_ERROR(CheckEmbeddings("negative_prompt_embeddings", r.negative_prompt_embeddings(),
                                      spec, max_seq));
    }
    if (!r.has_negative_prompt_embeddings() &&
        (!r.negative_prompt().empty() || !r.negative_prompt_2().empty())) {
      return Invalid(
          "negative_prompt needs negative_prompt_embeddings when prompt_embeddings is "
          "given");
    }
  } else if (spec.requires_prompt_embeddings() || !spec.accepts_text_prompt()) {
    return Invalid(absl::StrCat("prompt_embeddings is required: model family '", model.family(),
                                "' has no built-in text encoder (see GetModelInfo.inputs)"));
  } else if (r.prompt().empty()) {
    return Invalid("prompt is required (or send prompt_embeddings)");
  } else if (r.has_negative_prompt_embeddings()) {
    return Invalid("negative_prompt_embeddings needs prompt_embeddings too");
  }
  return absl::OkStatus();
}

// The sampling settings: the request's, or the model's defaults where it gives none.
struct Sampling {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t steps = 0;
  float guidance = 0;
  float true_cfg = 0;
  bool use_true_cfg = false;  // true_cfg > 1 and a negative prompt (or its embeddings)
  uint32_t max_sequence_length = 0;
};

absl::StatusOr<Sampling> ResolveSampling(const v1::GenerateRequest& r, const v1::Defaults& defaults,
                                         const DecodedInputImages& images,
                                         const RequestLimits& limits) {
  Sampling s;
  // A side the request leaves at 0: the images' (reference: the first one's, Flux2Pipeline's
  // `height = height or image_height`; qwen_edit: the one calculated from the last one,
  // QwenImageEditPlusPipeline's `height = height or calculated_height`), else the default.
  const bool height_from_image = r.height() == 0 && images.default_height != 0;
  const bool width_from_image = r.width() == 0 && images.default_width != 0;
  // qwen_edit floors a given side to its multiple_of (`height // multiple_of * multiple_of`); the
  // default from the image is a multiple already.
  const uint32_t multiple = static_cast<uint32_t>(std::max(images.size_multiple, 1));
  const auto given = [&](uint32_t v) {
    return images.floor_requested_size ? v / multiple * multiple : v;
  };
  s.height = r.height()          ? given(r.height())
             : height_from_image ? images.default_height
                                 : defaults.height();
  s.width = r.width()          ? given(r.width())
            : width_from_image ? images.default_width
                               : defaults.width();
  // The field's name in a refusal, saying where a value the request did not send came from.
  const auto field = [&](const std::string& side, uint32_t requested, bool from_image) {
    if (from_image) {
      return images.use == ImageInputUse::kQwenEdit
                 ? absl::StrCat(side, " (for images[", images.images.size() - 1,
                                "]'s aspect ratio; send ", side, " to choose another)")
                 : absl::StrCat(side, " (images[0]'s prepared ", side, "; send ", side,
                                " to choose another)");
    }
    if (requested != 0 && images.floor_requested_size && requested % multiple != 0) {
      return absl::StrCat(side, " (", requested, " floored to a multiple of ", multiple, ")");
    }
    return side;
  };
  RETURN_IF_ERROR(CheckSize(field("height", r.height(), height_from_image), s.height, limits,
                            limits.max_height));
  RETURN_IF_ERROR(
      CheckSize(field("width", r.width(), width_from_image), s.width, limits, limits.max_width));

  s.steps = r.num_inference_steps() ? r.num_inference_steps() : defaults.num_inference_steps();
  if (s.steps < limits.min_steps || s.steps > limits.max_steps) {
    return Invalid(absl::StrCat("num_inference_steps must be in ", limits.min_steps, "..",
                                limits.max_steps, ", got ", s.steps));
  }

  s.guidance = r.has_guidance_scale() ? r.guidance_scale() : defaults.guidance_scale();
  if (!std::isfinite(s.guidance) || s.guidance < limits.min_guidance ||
      s.guidance > limits.max_guidance) {
    return Invalid(absl::StrCat("guidance_scale must be in ", limits.min_guidance, "..",
                                limits.max_guidance, ", got ", s.guidance));
  }
  // 0 = not given: the model's default (Qwen-Image: 4.0) applies when there is a negative prompt.
  s.true_cfg = r.true_cfg_scale() != 0 ? r.true_cfg_scale() : defaults.true_cfg_scale();
  if (!std::isfinite(s.true_cfg) || s.true_cfg < 0 || s.true_cfg > limits.max_true_cfg) {
    return Invalid(
        absl::StrCat("true_cfg_scale must be in 0..", limits.max_true_cfg, ", got ", s.true_cfg));
  }
  const bool has_negative = !r.negative_prompt().empty() || r.has_negative_prompt_embeddings();
  s.use_true_cfg = s.true_cfg > 1.0f && has_negative;

  s.max_sequence_length =
      r.max_sequence_length() ? r.max_sequence_length() : defaults.max_sequence_length();
  if (s.max_sequence_length < 1 || s.max_sequence_length > limits.max_sequence_length) {
    return Invalid(absl::StrCat("max_sequence_length must be in 1..", limits.max_sequence_length,
                                ", got ", s.max_sequence_length));
  }
  return s;
}

// The output format: the request's, or (unspecified) PNG, or the model's first format when it
// cannot make images (latents-only models); it must be one the model supports.
absl::StatusOr<v1::OutputFormat> ResolveOutputFormat(const v1::GenerateRequest& r,
                                                     const worker::v1::ModelDescription& model) {
  const v1::InputSpec& spec = model.inputs();
  if (!v1::OutputFormat_IsValid(r.output_format())) {
    return Invalid(absl::StrCat("output_format ", r.output_format(), " is not a known format"));
  }
  v1::OutputFormat format = r.output_format();
  if (format == v1::OUTPUT_FORMAT_UNSPECIFIED) {
    format = v1::OUTPUT_FORMAT_PNG;
    bool png = spec.output_formats_size() == 0;
    for (int f : spec.output_formats()) png = png || f == v1::OUTPUT_FORMAT_PNG;
    if (!png) format = static_cast<v1::OutputFormat>(spec.output_formats(0));
  }

  if (spec.output_formats_size() > 0) {
    bool supported = false;
    std::string names;
    for (int f : spec.output_formats()) {
      supported = supported || f == format;
      absl::StrAppend(&names, names.empty() ? "" : ", ", v1::OutputFormat_Name(f));
    }
    if (!supported) {
      return Invalid(absl::StrCat("output_format ", v1::OutputFormat_Name(format),
                                  " is not available for model family '", model.family(),
                                  "' (supported: ", names, ")"));
    }
  }
  return format;
}

// The JPEG / WebP encoder's quality: output_compression, 0..100 (absent: 100); 0 for the other
// formats, which ignore it.
absl::StatusOr<uint32_t> ResolveOutputQuality(const v1::GenerateRequest& r,
                                              v1::OutputFormat format) {
  if (r.has_output_compression() && r.output_compression() > 100) {
    return Invalid(
        absl::StrCat("output_compression must be in 0..100, got ", r.output_compression()));
  }
  if (format != v1::OUTPUT_FORMAT_JPEG && format != v1::OUTPUT_FORMAT_WEBP) return 0u;
  return r.has_output_compression() ? r.output_compression() : 100u;
}

// The step cache's threshold: the request's, or the server's default when absent (0 = off).
absl::StatusOr<double> ResolveCacheThreshold(const v1::GenerateRequest& r,
                                             const worker::v1::ModelDescription& model) {
  const v1::StepCache& cache = model.step_cache();
  if (!r.has_cache_threshold()) return cache.default_threshold();
  const double t = r.cache_threshold();
  const double max = cache.max_threshold();
  if (std::isfinite(t) && t >= 0 && t <= max) return t == 0 ? 0.0 : t;  // -0 is off too
  if (!(max > 0)) {
    return Invalid(absl::StrCat("cache_threshold must be 0 (off): model family '", model.family(),
                                "' offers no step cache (ModelInfo.step_cache), got ", t));
  }
  return Invalid(absl::StrCat("cache_threshold must be in 0..", max,
                              " (ModelInfo.step_cache.max_threshold; 0 = off), got ", t));
}

// The request's seed, or a random one.
uint64_t PickSeed(const v1::GenerateRequest& r) {
  if (r.has_seed()) return r.seed();
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() >> 1;  // keep it representable as a signed 64-bit value for other clients
}

// The worker's item: the request's texts and embeddings with the resolved settings.
worker::v1::RunItem MakeItem(const v1::GenerateRequest& r, const Sampling& s, uint64_t seed,
                             const std::vector<std::pair<std::string, float>>& loras) {
  worker::v1::RunItem item;
  item.set_request_id(r.request_id());
  item.set_prompt(r.prompt());
  item.set_prompt_2(r.prompt_2().empty() ? r.prompt() : r.prompt_2());
  item.set_negative_prompt(r.negative_prompt());
  item.set_negative_prompt_2(r.negative_prompt_2().empty() ? r.negative_prompt()
                                                           : r.negative_prompt_2());
  item.set_seed(seed);
  item.set_guidance_scale(s.guidance);
  item.set_true_cfg_scale(s.use_true_cfg ? s.true_cfg : 1.0f);
  if (r.has_prompt_embeddings()) *item.mutable_prompt_embeddings() = r.prompt_embeddings();
  if (r.has_negative_prompt_embeddings()) {
    *item.mutable_negative_prompt_embeddings() = r.negative_prompt_embeddings();
  }
  for (const auto& [name, scale] : loras) {
    v1::LoraChoice* choice = item.add_loras();
    choice->set_name(name);
    choice->set_scale(scale);
  }
  return item;
}

}  // namespace

absl::StatusOr<ValidatedRequest> ValidateRequest(const v1::GenerateRequest& r,
                                                 const worker::v1::ModelDescription& model,
                                                 const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckTexts(r, limits));
  RETURN_IF_ERROR(CheckConditioning(r, model, limits));
  ASSIGN_OR_RETURN(const DecodedInputImages images, DecodeInputImages(r, model, limits));
  return ValidateRequest(r, model, limits, images);
}

absl::StatusOr<ValidatedRequest> ValidateRequest(const v1::GenerateRequest& r,
                                                 const worker::v1::ModelDescription& model,
                                                 const RequestLimits& limits,
                                                 const DecodedInputImages& images) {
  RETURN_IF_ERROR(CheckTexts(r, limits));
  RETURN_IF_ERROR(CheckConditioning(r, model, limits));
  ASSIGN_OR_RETURN(const Sampling sampling, ResolveSampling(r, model.defaults(), images, limits));
  ASSIGN_OR_RETURN(const v1::OutputFormat format, ResolveOutputFormat(r, model));
  ASSIGN_OR_RETURN(const uint32_t quality, ResolveOutputQuality(r, format));
  ASSIGN_OR_RETURN(auto loras, CheckLoras(r, model, limits));
  if (r.preview_images() > kMaxPreviewImages) {
    return Invalid(absl::StrCat("preview_images must be at most ", kMaxPreviewImages, ", got ",
                                r.preview_images()));
  }
  if (r.preview_images() > 0 && format == v1::OUTPUT_FORMAT_LATENTS) {
    return Invalid("preview_images: previews are images; this request returns latents");
  }
  ASSIGN_OR_RETURN(const double cache_threshold, ResolveCacheThreshold(r, model));

  ValidatedRequest out;
  out.item = MakeItem(r, sampling, PickSeed(r), loras);
  RETURN_IF_ERROR(AddInputImages(images, sampling.height, sampling.width, &out.item));
  out.shape.input_images = static_cast<uint32_t>(images.images.size());
  const bool has_embeddings = r.has_prompt_embeddings();
  out.shape.height = sampling.height;
  out.shape.width = sampling.width;
  out.shape.steps = sampling.steps;
  out.shape.max_sequence_length = sampling.max_sequence_length;
  out.shape.output_format = format;
  out.shape.output_quality = quality;
  out.shape.uses_embeddings = has_embeddings;
  out.shape.embeddings_length =
      has_embeddings ? static_cast<uint32_t>(r.prompt_embeddings().prompt_embeds().shape(1)) : 0;
  out.shape.true_cfg = sampling.use_true_cfg;
  out.shape.loras = std::move(loras);
  out.shape.preview_images = r.preview_images();
  out.shape.cache_threshold = cache_threshold;
  return out;
}

v1::ModelInfo MakeModelInfo(const worker::v1::ModelDescription& model, const RequestLimits& l,
                            uint64_t max_queue, uint64_t max_batch) {
  v1::ModelInfo info;
  info.set_name(model.name());
  info.set_family(model.family());
  info.set_tp_degree(model.tp_degree());
  info.set_dtype(model.dtype());
  info.set_device(model.device());
  info.set_version(DITSERVE_VERSION);
  info.set_guidance_distilled(model.guidance_distilled());
  *info.mutable_defaults() = model.defaults();
  *info.mutable_inputs() = model.inputs();
  *info.mutable_inputs()->mutable_image_inputs() =
      PublicImageInputs(model.inputs().image_inputs(), l);
  v1::Limits* limits = info.mutable_limits();
  limits->set_max_height(static_cast<uint32_t>(l.max_height));
  limits->set_max_width(static_cast<uint32_t>(l.max_width));
  limits->set_size_multiple(static_cast<uint32_t>(l.size_multiple));
  limits->set_min_steps(static_cast<uint32_t>(l.min_steps));
  limits->set_max_steps(static_cast<uint32_t>(l.max_steps));
  limits->set_min_guidance_scale(static_cast<float>(l.min_guidance));
  limits->set_max_guidance_scale(static_cast<float>(l.max_guidance));
  limits->set_max_sequence_length(static_cast<uint32_t>(l.max_sequence_length));
  limits->set_max_prompt_bytes(static_cast<uint32_t>(l.max_prompt_bytes));
  limits->set_max_queue_length(static_cast<uint32_t>(max_queue));
  limits->set_max_batch_size(static_cast<uint32_t>(max_batch));
  limits->set_max_preview_images(kMaxPreviewImages);
  limits->set_max_loras_per_request(static_cast<uint32_t>(l.max_loras_per_request));
  limits->set_max_lora_scale(static_cast<float>(l.max_lora_scale));
  *info.mutable_loras() = model.loras();
  *info.mutable_step_cache() = model.step_cache();
  return info;
}

}  // namespace ditserve::server
