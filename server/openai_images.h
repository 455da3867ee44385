// The OpenAI Images API, mapped to and from ditserve.v1 (no transport here: the routes are
// server/http_api.h): the JSON body of POST /v1/images/generations and the multipart/form-data
// fields of POST /v1/images/edits to GenerateRequests (one field parser for both), `quality` to
// steps (ApplyQuality), the responses back to OpenAI's {"created", "data": [{"b64_json"} or
// {"url"}], "output_format", ...}, GET /v1/models' list, and the one mapping of an absl::Status to
// an HTTP status and OpenAI's error object {"error": {"message", "type", "param", "code"}}.
//
// Pure functions of their arguments; thread-safe. Parse errors are INVALID_ARGUMENT whose message
// starts with the field it is about (as the request validator's do), so ParamFor can name it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ditserve/v1/ditserve.pb.h"
#include "server/frontend_options.h"

namespace ditserve::server::openai {

// The most images one call may ask for (OpenAI's own limit for `n`); also at most --max-queue,
// since the images of a call are admitted together.
constexpr uint32_t kMaxImagesPerRequest = 10;

// A parsed POST /v1/images/generations body or /v1/images/edits form.
struct ImagesRequest {
  std::string model;  // as sent; empty when absent
  uint32_t n = 1;
  bool has_seed = false;
  // OpenAI's levels, as sent: "auto" (absent), "low", "medium", "high", "standard", "hd".
  std::string quality = "auto";
  std::string output_format = "png";  // "png", "jpeg", "webp" (request.output_format says the same)
  bool url = false;                   // response_format "url": the images go to the image store
  std::string user;                   // as sent (logged with the request id); empty when absent
  bool stream = false;          // server-sent events (StreamEvent...) instead of one JSON answer
  uint32_t partial_images = 0;  // with stream: request.preview_images, the partial_image events
  // The first image's request (seed set when has_seed); ExpandImages makes the others.
  v1::GenerateRequest request;
};

// Parses the JSON body. Fields (null = absent), OpenAI's: `prompt` (string, required), `model`
// (string; when `served_model` is not empty, it must be that or absent), `n` (integer, 1..max_n),
// `size` ("WIDTHxHEIGHT" in pixels, OpenAI's named sizes included, which are pixel sizes as any
// other; or "auto" = the model's default), `response_format` ("b64_json", the default, or "url":
// ImagesRequest.url; whether the server keeps images is the transport's to say), `output_format`
// ("png", "jpeg", "webp"), `output_compression` (integer 0..100: the JPEG / WebP quality; ignored
// for png), `quality` ("auto", "low", "medium", "high", "standard", "hd": ApplyQuality),
// `background`
// ("auto", "opaque"; "transparent" is refused: no alpha), `style` ("vivid", "natural") and
// `moderation` ("low", "auto"): checked, no effect; `user` (string: logged); and ditserve's extras
// `seed` (unsigned integer), `num_inference_steps` (integer >= 1; wins over `quality`),
// `guidance_scale`, `true_cfg_scale` (numbers), `negative_prompt` (string), `loras` (an array of
// {"name": string (required), "scale": number (null or absent: 1.0)}, in GenerateRequest.loras),
// `cache_threshold` (a number: GenerateRequest.cache_threshold, set only when given; null or
// absent: the server's default).
// `stream` (boolean: the answer is OpenAI's server-sent events; then `n` must be 1 and
// `response_format` b64_json) and `partial_images` (0..3: that many partial_image events, the
// previews of GenerateRequest.preview_images; ignored without `stream`).
// An unknown field, a value outside a field's set, a
// wrong JSON type or malformed JSON is INVALID_ARGUMENT naming it. Ranges that depend on the model
// (size, steps, scales, prompt bytes, which adapters exist) are left to ValidateRequest.
absl::StatusOr<ImagesRequest> ParseImagesRequest(absl::string_view body,
                                                 const std::string& served_model, uint32_t max_n,
                                                 const RequestLimits& limits);

// One part of a multipart/form-data body, as the transport read it.
struct FormPart {
  std::string name;          // the Content-Disposition's name
  std::string filename;      // empty for a text field
  std::string content_type;  // as sent; not trusted (the image format is sniffed by Serve)
  std::string content;
};

// Maps the parts of a POST /v1/images/edits form (OpenAI's images edit request). Every part
// named `image` or `image[]` (a file or not; both names may be mixed) is one input image: its
// bytes go, in the order of the parts, into GenerateRequest.images, undecoded (Serve sniffs,
// checks and decodes them, naming images[i] in its errors). At least one is required ("image is
// required"). `mask` is refused ("mask: inpainting is not supported"). Every other part is a text
// field, at most once, with ParseImagesRequest's names and rules ("size" absent or "auto": height
// and width 0, the model's default: for FLUX.2 the first image's size); numbers are their JSON
// text ("2", "3.5"), `loras` the JSON array as one text field (the openai npm client's nested
// `loras[][name]` encoding is refused saying so); and `strength` (a number in (0, 1]: how much of
// the schedule runs from the noised image, image-to-image models; absent: the model's default) and
// OpenAI's `input_fidelity` ("high", "low": checked, no effect).
// An unknown field is INVALID_ARGUMENT naming it, as for generations. `parts` is consumed (the
// image bytes are moved).
absl::StatusOr<ImagesRequest> ParseImageEditRequest(std::vector<FormPart> parts,
                                                    const std::string& served_model, uint32_t max_n,
                                                    const RequestLimits& limits);

// The n requests of a call: copies of `parsed.request` (input images included), the i-th with
// seed + i when a seed was given (otherwise each draws its own random seed in the validator).
std::vector<v1::GenerateRequest> ExpandImages(const ImagesRequest& parsed);

// Sets request.num_inference_steps for `parsed->quality` unless the request gave its steps:
// "low", "medium", "high" ("hd" = "high") take their --quality-steps preset (a count, or a factor
// of `model_default_steps`, the served model's default with --default-steps, rounded, at least 1),
// kept within limits.min_steps..max_steps; "auto" and "standard" leave it 0 (the model's default).
// `model_default_steps` 0 (the model is not loaded yet): factors leave it 0 too.
void ApplyQuality(const QualitySteps& presets, uint32_t model_default_steps,
                  const RequestLimits& limits, ImagesRequest* parsed);

// "png" -> "image/png", "jpeg" -> "image/jpeg", "webp" -> "image/webp".
std::string ContentTypeOf(absl::string_view output_format);

// What a response says besides its images (OpenAI's response fields).
struct ImagesResponseInfo {
  std::string output_format = "png";
  std::string quality = "auto";  // the level asked for ("hd" -> "high", "standard" -> "auto")
  // response_format "url": the images' URLs, one per response (then no "b64_json").
  std::vector<std::string> urls;
};

// {"created": created, "data": [{"b64_json": <base64 of the image>, "seed": <seed used>}, ...]
// (or {"url": ...} per image), "output_format", "quality", "size": "WIDTHxHEIGHT" of the images,
// "background": "opaque"} in the order of `responses` ("seed" is ditserve's addition).
std::string ImagesResponseJson(const std::vector<v1::GenerateResponse>& responses, int64_t created,
                               const ImagesResponseInfo& info = {});

// A streamed call's server-sent events, OpenAI's streaming Images API: `kind` "image_generation"
// (POST /v1/images/generations) or "image_edit" (edits). Each is one whole frame, "event: <type>\n
// data: <JSON>\n\n":
//   <kind>.partial_image {"type", "b64_json" (the preview PNG), "created_at", "size" (of the
//     preview), "quality", "background": "opaque", "output_format": "png" (previews are PNGs),
//     "partial_image_index"} for a Progress event that carries a preview;
//   <kind>.completed {"type", "b64_json", "created_at", "size", "quality", "background",
//     "output_format", "usage" (zero tokens: no tokens are counted), "seed"} for the result;
//   error {"error": {...}} (ErrorJson's object) when the call fails after its stream began (the
//     openai clients raise it as an APIError).
std::string PartialImageEvent(absl::string_view kind, const v1::Progress& progress,
                              const ImagesResponseInfo& info, int64_t created);
std::string CompletedEvent(absl::string_view kind, const v1::GenerateResponse& response,
                           const ImagesResponseInfo& info, int64_t created);
std::string ErrorEvent(const absl::Status& status);

// OpenAI's model object of the served model ({"id": name, "object": "model", "created",
// "owned_by": "ditserve"}, plus ditserve's "loras": [{"name", "format", "rank", "modules"}, ...],
// the adapters requests may choose, [] when none, and "image_inputs": ModelInfo.inputs.image_inputs
// ({"max_images", "min_images", "condition_area", "use", "min_side", "max_aspect_ratio",
// "max_area", "size_multiple", "default_strength", "max_image_bytes", "max_image_pixels",
// "max_image_side"}; max_images 0: the model takes no input image, POST /v1/images/edits refuses
// it), and for the playground "family", "guidance_distilled", "defaults" ({"width", "height",
// "num_inference_steps", "guidance_scale", "true_cfg_scale"}) and "limits" ({"max_width",
// "max_height", "size_multiple", "min_steps", "max_steps", "min_guidance_scale",
// "max_guidance_scale", "max_prompt_bytes", "max_loras_per_request", "max_lora_scale"})) and the
// list GET /v1/models returns ({"object": "list", "data": [it]}).
std::string ModelJson(const v1::ModelInfo& info, int64_t created);
std::string ModelsListJson(const v1::ModelInfo& info, int64_t created);

// How a status is answered over HTTP.
struct HttpError {
  int http_status = 500;
  std::string type;  // OpenAI's error.type
  std::string code;  // OpenAI's error.code
};

// The one mapping: INVALID_ARGUMENT 400 invalid_request_error; UNAUTHENTICATED 401
// authentication_error; PERMISSION_DENIED 403 permission_error; NOT_FOUND 404 not_found_error;
// RESOURCE_EXHAUSTED 429 rate_limit_error (send Retry-After); UNAVAILABLE 503 server_error (send
// Retry-After); DEADLINE_EXCEEDED 504 timeout_error; everything else 500 server_error. `code` is
// the status code's name in lower case ("invalid_argument", "resource_exhausted", ...).
HttpError HttpErrorFor(const absl::Status& status);
// Whether the answer to `status` carries a Retry-After header (429, 503).
bool WantsRetryAfter(const absl::Status& status);

// The request field an error is about, for OpenAI's `param`: an INVALID_ARGUMENT whose message
// starts with a field of the request ("n must be ...", "prompt is 9000 bytes ...", "height must be
// ..." -> "size", as the size string gives both; "images[1] ..." -> "image", the edit form's
// field), or the field an unknown-field error names; empty (JSON null) otherwise.
std::string ParamFor(const absl::Status& status);

// {"error": {"message", "type", "param" (null when empty), "code"}}.
std::string ErrorJson(absl::string_view message, const HttpError& error, absl::string_view param);
// ErrorJson for `status` with HttpErrorFor and ParamFor.
std::string ErrorJson(const absl::Status& status);

}  // namespace ditserve::server::openai
