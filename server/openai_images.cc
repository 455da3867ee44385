#include "server/openai_images.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "imaging/format.h"

namespace ditserve::server::openai {
namespace {

using Json = nlohmann::json;

// The status payload naming the field of an error whose message cannot start with it (an unknown
// field).
constexpr char kParamPayload[] = "type.ditserve/openai.param";

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// The edit form's image parts: `image`, or `image[]` repeated (the openai clients' array form).
bool IsEditImageField(const std::string& name) {
  return name == "image" || name == "image[]";
}

absl::Status InvalidParam(const std::string& param, const std::string& message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

// JSON's name for a value's type, for "must be a string, got number".
const char* TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number with a fraction";
    default:
      return "an unsupported value";
  }
}

// A short rendering of a value for messages (strings quoted, long ones cut).
std::string Shown(const Json& v) {
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

absl::StatusOr<std::string> String(const std::string& field, const Json& v) {
  if (!v.is_string()) {
    return Invalid(absl::StrCat(field, " must be a string, got ", TypeName(v)));
  }
  return v.get<std::string>();
}

absl::StatusOr<double> Number(const std::string& field, const Json& v) {
  if (!v.is_number()) return Invalid(absl::StrCat(field, " must be a number, got ", TypeName(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Invalid(absl::StrCat(field, " must be finite"));
  return d;
}

// An integer in min..max (inclusive), unsigned JSON integers included.
absl::StatusOr<uint64_t> Integer(const std::string& field, const Json& v, uint64_t min,
                                 uint64_t max) {
  if (!v.is_number_integer()) {
    return Invalid(
        absl::StrCat(field, " must be an integer in ", min, "..", max, ", got ", TypeName(v)));
  }
  const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  const uint64_t u = negative ? 0 : v.get<uint64_t>();
  if (negative || u < min || u > max) {
    return Invalid(absl::StrCat(field, " must be in ", min, "..", max, ", got ", Shown(v)));
  }
  return u;
}

// "WIDTHxHEIGHT" (OpenAI's order) in pixels; "auto": the model's default (0, 0).
absl::Status ParseSize(const Json& v, v1::GenerateRequest* r) {
  if (!v.is_string()) {
    return Invalid(absl::StrCat("size must be a string \"WIDTHxHEIGHT\", got ", TypeName(v)));
  }
  const std::string s = v.get<std::string>();
  if (s == "auto") return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(s, 'x');
  auto dimension = [](const std::string& d, uint32_t* out) {
    if (d.empty() || d.size() > 5) return false;
    for (char c : d) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    }
    return absl::SimpleAtoi(d, out) && *out > 0;
  };
  uint32_t width = 0, height = 0;
  if (parts.size() != 2 || !dimension(parts[0], &width) || !dimension(parts[1], &height)) {
    return Invalid(absl::StrCat(
        "size must be \"WIDTHxHEIGHT\" in pixels (e.g. \"1024x1024\") or \"auto\", got ",
        Shown(v)));
  }
  r->set_width(width);
  r->set_height(height);
  return absl::OkStatus();
}

// [{"name": "x", "scale": 0.8}, ...] (scale null or absent: 1.0) to GenerateRequest.loras. Which
// names exist and the scale range are the request validator's.
absl::Status ParseLoras(const Json& v, v1::GenerateRequest* r) {
  if (!v.is_array()) {
    return Invalid(absl::StrCat(
        "loras must be an array of {\"name\": string, \"scale\": number} objects, got ",
        TypeName(v)));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& entry = v[i];
    const std::string field = absl::StrCat("loras[", i, "]");
    if (!entry.is_object()) {
      return Invalid(absl::StrCat(field,
                                  " must be an object {\"name\": string, \"scale\": number}, got ",
                                  TypeName(entry)));
    }
    v1::LoraChoice* choice = r->add_loras();
    for (const auto& [key, value] : entry.items()) {
      if (key == "name") {
        auto name = String(field + ".name", value);
        if (!name.ok()) return name.status();
        choice->set_name(*std::move(name));
      } else if (key == "scale") {
        if (value.is_null()) continue;
        auto scale = Number(field + ".scale", value);
        if (!scale.ok()) return scale.status();
        choice->set_scale(static_cast<float>(*scale));
      } else {
        return Invalid(absl::StrCat(field, " has an unknown field \"", key,
                                    "\" (an adapter is {\"name\", \"scale\"})"));
      }
    }
    if (choice->name().empty()) return Invalid(absl::StrCat(field, ".name is required"));
  }
  return absl::OkStatus();
}

// The JSON body's fields (POST /v1/images/generations): OpenAI's, then ditserve's.
const std::set<std::string>& KnownFields() {
  static const auto* fields = new std::set<std::string>{"prompt",
                                                        "model",
                                                        "n",
                                                        "size",
                                                        "response_format",
                                                        "output_format",
                                                        "output_compression",
                                                        "quality",
                                                        "background",
                                                        "style",
                                                        "moderation",
                                                        "user",
                                                        "seed",
                                                        "num_inference_steps",
                                                        "max_sequence_length",
                                                        "guidance_scale",
                                                        "true_cfg_scale",
                                                        "negative_prompt",
                                                        "loras",
                                                        "stream",
                                                        "partial_images",
                                                        "cache_threshold"};
  return *fields;
}

// The edit form's text fields: the body's, `strength` and OpenAI's `input_fidelity` (the image
// parts are not text fields).
bool IsEditTextField(const std::string& name) {
  return name == "strength" || name == "input_fidelity" || KnownFields().count(name) > 0;
}

// Text fields of the edit form whose value is JSON text (a number, or the loras array).
bool IsJsonFormField(const std::string& name) {
  static const auto* fields = new std::set<std::string>{"n",
                                                        "seed",
                                                        "num_inference_steps",
                                                        "max_sequence_length",
                                                        "guidance_scale",
                                                        "true_cfg_scale",
                                                        "strength",
                                                        "loras",
                                                        "output_compression",
                                                        "stream",
                                                        "partial_images",
                                                        "cache_threshold"};
  return fields->count(name) > 0;
}

// Fields that error messages start with (the parser's and the request validator's), mapped to the
// request field a client sent.
std::string FieldOfWord(const std::string& word) {
  if (word == "height" || word == "width") return "size";
  if (word == "images") return "image";  // GenerateRequest.images: the edit form's `image` parts
  if (word == "preview_images") return "partial_images";
  // The request's own fields, and the words the request validator's messages start with that a
  // client did not send under that name (GenerateRequest fields the HTTP API fills itself).
  if (IsEditTextField(word)) return word;
  static const auto* others = new std::set<std::string>{
      "prompt_2", "negative_prompt_2", "request_id", "image", "mask"};
  return others->count(word) ? word : "";
}

// The request body, parsed: a JSON object whose fields are all known ones.
absl::Status ParseBody(absl::string_view body, Json* doc) {
  try {
    *doc = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    // e.g. "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    std::string what = e.what();
    if (const size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    return Invalid(absl::StrCat("the request body is not valid JSON: ", what));
  } catch (...) {
    return Invalid("the request body is not valid JSON");
  }
  if (!doc->is_object()) {
    return Invalid(absl::StrCat("the request body must be a JSON object, got ", TypeName(*doc)));
  }
  for (const auto& [key, value] : doc->items()) {
    if (!KnownFields().count(key)) {
      return InvalidParam(
          key, absl::StrCat("unknown field \"", key, "\" (see the README's HTTP API section)"));
    }
  }
  return absl::OkStatus();
}

// A field of the body; nullptr when absent or null.
const Json* Field(const Json& doc, const char* name) {
  auto it = doc.find(name);
  return it == doc.end() || it->is_null() ? nullptr : &*it;
}

// prompt (required, not empty) and model (when named and the server names its model: that one).
absl::Status ParsePromptAndModel(const Json& doc, const std::string& served_model,
                                 ImagesRequest* out) {
  const Json* prompt = Field(doc, "prompt");
  if (prompt == nullptr) return Invalid("prompt is required");
  auto prompt_text = String("prompt", *prompt);
  if (!prompt_text.ok()) return prompt_text.status();
  if (prompt_text->empty()) return Invalid("prompt must not be empty");
  out->request.set_prompt(*std::move(prompt_text));

  if (const Json* v = Field(doc, "model")) {
    auto model = String("model", *v);
    if (!model.ok()) return model.status();
    if (!model->empty() && !served_model.empty() && *model != served_model) {
      return Invalid(absl::StrCat("model \"", *model,
                                  "\" is not served here: this server serves \"", served_model,
                                  "\" (GET /v1/models)"));
    }
    out->model = *std::move(model);
  }
  return absl::OkStatus();
}

// A string field that must be one of `allowed` (listed in the message); absent: `*out` unchanged.
absl::Status OneOf(const Json& doc, const char* field, std::initializer_list<const char*> allowed,
                   std::string* out) {
  const Json* v = Field(doc, field);
  if (v == nullptr) return absl::OkStatus();
  auto value = String(field, *v);
  if (!value.ok()) return value.status();
  std::string names;
  for (const char* a : allowed) {
    if (*value == a) {
      *out = *std::move(value);
      return absl::OkStatus();
    }
    absl::StrAppend(&names, names.empty() ? "" : ", ", "\"", a, "\"");
  }
  return Invalid(absl::StrCat(field, " must be one of ", names, ", got ", Shown(*v)));
}

// OpenAI's fields that choose how the image looks or is checked: quality (to steps later,
// ApplyQuality), background (no alpha: "transparent" refused), and style, moderation and
// input_fidelity (checked, no effect).
absl::Status ParseLooks(const Json& doc, ImagesRequest* out) {
  RETURN_IF_ERROR(
      OneOf(doc, "quality", {"auto", "low", "medium", "high", "standard", "hd"}, &out->quality));
  if (const Json* v = Field(doc, "background");
      v != nullptr && v->is_string() && v->get<std::string>() == "transparent") {
    return Invalid(
        "background \"transparent\" is not supported: the models make opaque RGB images (no "
        "alpha channel); ask for \"opaque\" or \"auto\"");
  }
  std::string ignored;
  RETURN_IF_ERROR(OneOf(doc, "background", {"auto", "opaque"}, &ignored));
  RETURN_IF_ERROR(OneOf(doc, "style", {"vivid", "natural"}, &ignored));
  RETURN_IF_ERROR(OneOf(doc, "moderation", {"low", "auto"}, &ignored));
  return OneOf(doc, "input_fidelity", {"high", "low"}, &ignored);  // the edit form only
}

// n, size, and what comes back: b64_json or url, png / jpeg / webp with output_compression; user
// (a string, kept for the log).
absl::Status ParseCountAndFormats(const Json& doc, uint32_t max_n, ImagesRequest* out) {
  if (const Json* v = Field(doc, "n")) {
    auto n = Integer("n", *v, 1, max_n);
    if (!n.ok()) {
      return Invalid(absl::StrCat(n.status().message(), " (at most ", kMaxImagesPerRequest,
                                  " images a call, and no more than the admission queue holds)"));
    }
    out->n = static_cast<uint32_t>(*n);
  }
  if (const Json* v = Field(doc, "size")) {
    if (absl::Status s = ParseSize(*v, &out->request); !s.ok()) return s;
  }
  if (const Json* v = Field(doc, "response_format")) {
    auto format = String("response_format", *v);
    if (!format.ok()) return format.status();
    if (*format != "b64_json" && *format != "url") {
      return Invalid(
          absl::StrCat("response_format must be \"b64_json\" or \"url\", got ", Shown(*v)));
    }
    out->url = *format == "url";
  }
  RETURN_IF_ERROR(OneOf(doc, "output_format", {"png", "jpeg", "webp"}, &out->output_format));
  out->request.set_output_format(out->output_format == "jpeg"   ? v1::OUTPUT_FORMAT_JPEG
                                 : out->output_format == "webp" ? v1::OUTPUT_FORMAT_WEBP
                                                                : v1::OUTPUT_FORMAT_PNG);
  if (const Json* v = Field(doc, "output_compression")) {
    auto compression = Integer("output_compression", *v, 0, 100);
    if (!compression.ok()) return compression.status();
    out->request.set_output_compression(static_cast<uint32_t>(*compression));
  }
  if (const Json* v = Field(doc, "user")) {
    auto user = String("user", *v);
    if (!user.ok()) return user.status();
    out->user = *std::move(user);
  }
  return absl::OkStatus();
}

// seed (after n: room for n consecutive seeds), steps, guidance scales, negative prompt, LoRAs,
// the step cache's threshold.
absl::Status ParseSampling(const Json& doc, const RequestLimits& limits, ImagesRequest* out) {
  v1::GenerateRequest& r = out->request;
  if (const Json* v = Field(doc, "seed")) {
    // Room for the n consecutive seeds seed, seed + 1, ...
    auto seed = Integer("seed", *v, 0, std::numeric_limits<uint64_t>::max() - (out->n - 1));
    if (!seed.ok()) return seed.status();
    r.set_seed(*seed);
    out->has_seed = true;
  }
  if (const Json* v = Field(doc, "num_inference_steps")) {
    // 0 would mean "the model's default" on the wire: refuse it rather than change its meaning.
    auto steps = Integer("num_inference_steps", *v, std::max<uint64_t>(1, limits.min_steps),
                         limits.max_steps);
    if (!steps.ok()) return steps.status();
    r.set_num_inference_steps(static_cast<uint32_t>(*steps));
  }
  if (const Json* v = Field(doc, "max_sequence_length")) {
    // As num_inference_steps: 0 is the wire's "the model's default", so refused here.
    auto length = Integer("max_sequence_length", *v, 1, limits.max_sequence_length);
    if (!length.ok()) return length.status();
    r.set_max_sequence_length(static_cast<uint32_t>(*length));
  }
  if (const Json* v = Field(doc, "guidance_scale")) {
    auto g = Number("guidance_scale", *v);
    if (!g.ok()) return g.status();
    r.set_guidance_scale(static_cast<float>(*g));
  }
  if (const Json* v = Field(doc, "true_cfg_scale")) {
    auto g = Number("true_cfg_scale", *v);
    if (!g.ok()) return g.status();
    r.set_true_cfg_scale(static_cast<float>(*g));
  }
  if (const Json* v = Field(doc, "negative_prompt")) {
    auto negative = String("negative_prompt", *v);
    if (!negative.ok()) return negative.status();
    r.set_negative_prompt(*std::move(negative));
  }
  if (const Json* v = Field(doc, "loras")) {
    if (absl::Status s = ParseLoras(*v, &r); !s.ok()) return s;
  }
  if (const Json* v = Field(doc, "cache_threshold")) {  // its range is the model's (validator)
    auto threshold = Number("cache_threshold", *v);
    if (!threshold.ok()) return threshold.status();
    r.set_cache_threshold(*threshold);
  }
  if (const Json* v = Field(doc, "strength")) {  // the edit form only
    auto strength = Number("strength", *v);
    if (!strength.ok()) return strength.status();
    // 0 would mean "the model's default" on the wire: refuse it rather than change its meaning.
    if (*strength <= 0 || *strength > 1) {
      return Invalid(absl::StrCat("strength must be in (0, 1], got ", Shown(*v)));
    }
    r.set_strength(*strength);  // a double on the wire: 0.6 must stay 0.6
  }
  return absl::OkStatus();
}

// stream (a boolean: server-sent events) and partial_images (0..3, the previews it carries; ignored
// without stream, as OpenAI ignores it). A stream answers one image in b64_json.
absl::Status ParseStreaming(const Json& doc, ImagesRequest* out) {
  if (const Json* v = Field(doc, "stream")) {
    if (!v->is_boolean()) return Invalid(absl::StrCat("stream must be a boolean, got ", Shown(*v)));
    out->stream = v->get<bool>();
  }
  if (const Json* v = Field(doc, "partial_images")) {
    auto partial = Integer("partial_images", *v, 0, kMaxPreviewImages);
    if (!partial.ok()) return partial.status();
    out->partial_images = static_cast<uint32_t>(*partial);
  }
  if (!out->stream) return absl::OkStatus();
  if (out->n != 1) {
    return Invalid(
        absl::StrCat("n must be 1 with stream: true (one image a stream), got ", out->n));
  }
  if (out->url) {
    return Invalid("response_format \"url\" does not stream: a stream's events carry b64_json");
  }
  out->request.set_preview_images(out->partial_images);
  return absl::OkStatus();
}

// The request's fields, whichever body carried them (a JSON object of known fields: the JSON body
// itself, or the edit form's text fields as FormFields converts them), in a fixed order: the first
// error a request has is the one reported. The one field parser of both routes.
absl::StatusOr<ImagesRequest> ParseFields(const Json& doc, const std::string& served_model,
                                          uint32_t max_n, const RequestLimits& limits) {
  ImagesRequest out;
  out.request.set_output_format(v1::OUTPUT_FORMAT_PNG);
  RETURN_IF_ERROR(ParsePromptAndModel(doc, served_model, &out));
  RETURN_IF_ERROR(ParseCountAndFormats(doc, max_n, &out));
  RETURN_IF_ERROR(ParseLooks(doc, &out));
  RETURN_IF_ERROR(ParseSampling(doc, limits, &out));
  RETURN_IF_ERROR(ParseStreaming(doc, &out));
  return out;
}

// A text field of the edit form as the JSON body would carry it: JSON text for numbers, `stream`'s
// true / false and loras
// ("2", "3.5", "[{...}]"; "null" is absent; text that is not JSON stays a string, which the
// field's parser then refuses naming the type), the text itself otherwise.
Json FormValue(const std::string& name, const std::string& text) {
  if (!IsJsonFormField(name)) return text;
  Json v = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return text;
  const bool shape_ok =
      name == "loras" || v.is_number() || v.is_null() || (name == "stream" && v.is_boolean());
  if (!shape_ok) return text;
  return v;
}

// The edit form's text parts as a JSON object of known fields, each at most once.
absl::Status FormFields(const std::vector<FormPart>& parts, Json* doc) {
  *doc = Json::object();
  for (const FormPart& part : parts) {
    if (IsEditImageField(part.name)) continue;
    if (part.name == "mask") {
      return InvalidParam("mask",
                          "mask: inpainting is not supported (send the images to edit as "
                          "`image` without a mask)");
    }
    if (absl::StartsWith(part.name, "loras[")) {
      return InvalidParam("loras",
                          absl::StrCat("loras: in a multipart form, send loras as one text field "
                                       "holding the JSON array, e.g. loras=[{\"name\": \"style\", "
                                       "\"scale\": 0.8}] (got a field \"",
                                       part.name, "\")"));
    }
    if (!IsEditTextField(part.name)) {
      return InvalidParam(part.name, absl::StrCat("unknown field \"", part.name,
                                                  "\" (see the README's HTTP API section)"));
    }
    if (doc->contains(part.name)) {
      return InvalidParam(part.name, absl::StrCat(part.name, " is given twice"));
    }
    (*doc)[part.name] = FormValue(part.name, part.content);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImagesRequest> ParseImagesRequest(absl::string_view body,
                                                 const std::string& served_model, uint32_t max_n,
                                                 const RequestLimits& limits) {
  Json doc;
  RETURN_IF_ERROR(ParseBody(body, &doc));
  return ParseFields(doc, served_model, max_n, limits);
}

absl::StatusOr<ImagesRequest> ParseImageEditRequest(std::vector<FormPart> parts,
                                                    const std::string& served_model, uint32_t max_n,
                                                    const RequestLimits& limits) {
  Json doc;
  RETURN_IF_ERROR(FormFields(parts, &doc));
  ASSIGN_OR_RETURN(ImagesRequest out, ParseFields(doc, served_model, max_n, limits));
  for (FormPart& part : parts) {
    if (IsEditImageField(part.name)) out.request.add_images(std::move(part.content));
  }
  if (out.request.images_size() == 0) {
    return InvalidParam("image",
                        "image is required: one or more image files (PNG, JPEG or WebP), as "
                        "`image` or repeated `image[]` parts");
  }
  return out;
}

std::vector<v1::GenerateRequest> ExpandImages(const ImagesRequest& parsed) {
  std::vector<v1::GenerateRequest> out(parsed.n, parsed.request);
  if (parsed.has_seed) {
    for (uint32_t i = 0; i < parsed.n; ++i) out[i].set_seed(parsed.request.seed() + i);
  }
  return out;
}

void ApplyQuality(const QualitySteps& presets, uint32_t model_default_steps,
                  const RequestLimits& limits, ImagesRequest* parsed) {
  if (parsed->request.num_inference_steps() != 0) return;  // the request's own steps win
  const std::string& q = parsed->quality;
  const QualityPreset* preset = q == "low"                 ? &presets.low
                                : q == "medium"            ? &presets.medium
                                : q == "high" || q == "hd" ? &presets.high
                                                           : nullptr;
  if (preset == nullptr) return;  // auto, standard: the model's default
  uint64_t steps = preset->steps;
  if (steps == 0) {
    if (model_default_steps == 0) return;
    steps = std::max<uint64_t>(
        1, static_cast<uint64_t>(std::llround(preset->factor * model_default_steps)));
  }
  steps = std::clamp<uint64_t>(steps, std::max<uint64_t>(1, limits.min_steps),
                               std::max<uint64_t>(1, limits.max_steps));
  parsed->request.set_num_inference_steps(static_cast<uint32_t>(steps));
}

std::string ContentTypeOf(absl::string_view output_format) {
  if (output_format == "jpeg") return "image/jpeg";
  if (output_format == "webp") return "image/webp";
  return "image/png";
}

namespace {

// OpenAI's quality names in an answer ("hd" -> "high", "standard" -> "auto").
std::string AnsweredQuality(const std::string& quality) {
  return quality == "hd" ? "high" : quality == "standard" ? "auto" : quality;
}

std::string Frame(absl::string_view event, const Json& data) {
  return absl::StrCat("event: ", event, "\ndata: ", data.dump(), "\n\n");
}

}  // namespace

std::string ImagesResponseJson(const std::vector<v1::GenerateResponse>& responses, int64_t created,
                               const ImagesResponseInfo& info) {
  Json data = Json::array();
  for (size_t i = 0; i < responses.size(); ++i) {
    const v1::GenerateResponse& r = responses[i];
    if (i < info.urls.size()) {
      data.push_back({{"url", info.urls[i]}, {"seed", r.seed()}});
    } else {
      data.push_back({{"b64_json", absl::Base64Escape(r.image())}, {"seed", r.seed()}});
    }
  }
  const std::string quality = AnsweredQuality(info.quality);
  Json out = {{"created", created},
              {"data", std::move(data)},
              {"background", "opaque"},
              {"output_format", info.output_format},
              {"quality", quality}};
  if (!responses.empty()) {
    out["size"] = absl::StrCat(responses[0].width(), "x", responses[0].height());
  }
  return out.dump();
}

std::string PartialImageEvent(absl::string_view kind, const v1::Progress& progress,
                              const ImagesResponseInfo& info, int64_t created) {
  const std::string type = absl::StrCat(kind, ".partial_image");
  Json data = {{"type", type},
               {"b64_json", absl::Base64Escape(progress.preview())},
               {"created_at", created},
               {"quality", AnsweredQuality(info.quality)},
               {"background", "opaque"},
               {"output_format", "png"},
               {"partial_image_index", progress.preview_index()}};
  if (auto header = imaging::ReadImageHeader(progress.preview()); header.ok()) {
    data["size"] = absl::StrCat(header->width, "x", header->height);
  }
  return Frame(type, data);
}

std::string CompletedEvent(absl::string_view kind, const v1::GenerateResponse& response,
                           const ImagesResponseInfo& info, int64_t created) {
  const std::string type = absl::StrCat(kind, ".completed");
  const Json usage = {{"input_tokens", 0},
                      {"input_tokens_details", {{"image_tokens", 0}, {"text_tokens", 0}}},
                      {"output_tokens", 0},
                      {"total_tokens", 0}};
  return Frame(type, {{"type", type},
                      {"b64_json", absl::Base64Escape(response.image())},
                      {"created_at", created},
                      {"size", absl::StrCat(response.width(), "x", response.height())},
                      {"quality", AnsweredQuality(info.quality)},
                      {"background", "opaque"},
                      {"output_format", info.output_format},
                      {"usage", usage},
                      {"seed", response.seed()}});
}

std::string ErrorEvent(const absl::Status& status) {
  return Frame("error", Json::parse(ErrorJson(status)));
}

namespace {

// What the playground (server/playground/) reads of the model card besides OpenAI's fields:
// "family", "guidance_distilled", "defaults" (ModelInfo.defaults: the values a request's absent
// fields take) and "limits" (the ranges the request validator checks).
void AddModelCard(const v1::ModelInfo& info, Json* model) {
  // float fields as the decimal they were set from (3.5, not 3.5000000001), to 6 digits.
  const auto decimal = [](float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; };
  const v1::Defaults& d = info.defaults();
  const v1::Limits& l = info.limits();
  (*model)["family"] = info.family();
  (*model)["guidance_distilled"] = info.guidance_distilled();
  (*model)["defaults"] = {{"width", d.width()},
                          {"height", d.height()},
                          {"num_inference_steps", d.num_inference_steps()},
                          {"guidance_scale", decimal(d.guidance_scale())},
                          {"true_cfg_scale", decimal(d.true_cfg_scale())}};
  (*model)["limits"] = {{"max_width", l.max_width()},
                        {"max_height", l.max_height()},
                        {"size_multiple", l.size_multiple()},
                        {"min_steps", l.min_steps()},
                        {"max_steps", l.max_steps()},
                        {"min_guidance_scale", decimal(l.min_guidance_scale())},
                        {"max_guidance_scale", decimal(l.max_guidance_scale())},
                        {"max_prompt_bytes", l.max_prompt_bytes()},
                        {"max_loras_per_request", l.max_loras_per_request()},
                        {"max_lora_scale", decimal(l.max_lora_scale())}};
}

Json ModelObject(const v1::ModelInfo& info, int64_t created) {
  Json loras = Json::array();
  for (const v1::LoraInfo& l : info.loras()) {
    loras.push_back(
        {{"name", l.name()}, {"format", l.format()}, {"rank", l.rank()}, {"modules", l.modules()}});
  }
  const v1::ImageInputs& in = info.inputs().image_inputs();
  Json image_inputs = {{"max_images", in.max_images()},
                       {"min_images", in.min_images()},
                       {"condition_area", in.condition_area()},
                       {"use", in.use()},
                       {"min_side", in.min_side()},
                       {"max_aspect_ratio", in.max_aspect_ratio()},
                       {"max_area", in.max_area()},
                       {"size_multiple", in.size_multiple()},
                       {"default_strength", in.default_strength()},
                       {"max_image_bytes", in.max_image_bytes()},
                       {"max_image_pixels", in.max_image_pixels()},
                       {"max_image_side", in.max_image_side()}};
  Json model = {{"id", info.name()},         {"object", "model"},
                {"created", created},        {"owned_by", "ditserve"},
                {"loras", std::move(loras)}, {"image_inputs", std::move(image_inputs)}};
  AddModelCard(info, &model);
  return model;
}

}  // namespace

std::string ModelJson(const v1::ModelInfo& info, int64_t created) {
  return ModelObject(info, created).dump();
}

std::string ModelsListJson(const v1::ModelInfo& info, int64_t created) {
  return Json{{"object", "list"}, {"data", Json::array({ModelObject(info, created)})}}.dump();
}

HttpError HttpErrorFor(const absl::Status& status) {
  HttpError e;
  e.code = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "timeout_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

bool WantsRetryAfter(const absl::Status& status) {
  const int http = HttpErrorFor(status).http_status;
  return http == 429 || http == 503;
}

std::string ParamFor(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return "";
  if (auto payload = status.GetPayload(kParamPayload)) return std::string(*payload);
  const absl::string_view message = status.message();
  const size_t end = message.find_first_of(" .[:");
  return FieldOfWord(std::string(message.substr(0, end)));
}

std::string ErrorJson(absl::string_view message, const HttpError& error, absl::string_view param) {
  Json e = {{"message", std::string(message)},
            {"type", error.type},
            {"param", param.empty() ? Json(nullptr) : Json(std::string(param))},
            {"code", error.code}};
  // A message may quote invalid UTF-8 from the request: replace it rather than fail.
  return Json{{"error", std::move(e)}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ErrorJson(const absl::Status& status) {
  return ErrorJson(status.message(), HttpErrorFor(status), ParamFor(status));
}

}  // namespace ditserve::server::openai
