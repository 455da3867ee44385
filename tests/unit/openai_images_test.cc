// The OpenAI Images mapping (server/openai_images.h): JSON request bodies and edit forms to
// GenerateRequests, the responses and model list back, and the one absl::Status -> HTTP status /
// OpenAI error mapping.
// Also AdmissionQueue::PushAll, which admits the images of one call together.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/admission_queue.h"
#include "server/openai_images.h"

namespace ditserve::server::openai {
namespace {

using Json = nlohmann::json;

absl::StatusOr<ImagesRequest> Parse(const std::string& body, uint32_t max_n = 10,
                                    const std::string& served = "flux1-tiny") {
  return ParseImagesRequest(body, served, max_n, RequestLimits());
}

// The parse error of `body`: its message, which must name `param` as OpenAI's param.
std::string ErrorOf(const std::string& body, const std::string& param, uint32_t max_n = 10) {
  auto r = Parse(body, max_n);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(ParamFor(r.status()), param) << r.status();
  return std::string(r.status().message());
}

TEST(OpenAIImagesRequest, MapsEveryFieldToTheGenerateRequest) {
  auto r = Parse(R"({"model": "flux1-tiny", "prompt": "a cat", "n": 3, "size": "96x64",
                     "response_format": "b64_json", "seed": 41, "num_inference_steps": 6,
                     "guidance_scale": 2.5, "negative_prompt": "blurry", "true_cfg_scale": 4,
                     "user": "someone", "output_format": "png"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "flux1-tiny");
  EXPECT_EQ(r->n, 3u);
  EXPECT_TRUE(r->has_seed);
  const v1::GenerateRequest& g = r->request;
  EXPECT_EQ(g.prompt(), "a cat");
  EXPECT_EQ(g.width(), 96u);  // OpenAI's size is WIDTHxHEIGHT
  EXPECT_EQ(g.height(), 64u);
  EXPECT_EQ(g.seed(), 41u);
  EXPECT_EQ(g.num_inference_steps(), 6u);
  EXPECT_FLOAT_EQ(g.guidance_scale(), 2.5f);
  EXPECT_TRUE(g.has_guidance_scale());
  EXPECT_EQ(g.negative_prompt(), "blurry");
  EXPECT_FLOAT_EQ(g.true_cfg_scale(), 4.0f);
  EXPECT_EQ(g.output_format(), v1::OUTPUT_FORMAT_PNG);

  const auto images = ExpandImages(*r);
  ASSERT_EQ(images.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(images[i].seed(), 41u + i) << "image " << i;
    EXPECT_EQ(images[i].prompt(), "a cat");
    EXPECT_EQ(images[i].width(), 96u);
  }
}

TEST(OpenAIImagesRequest, DefaultsLeaveTheServerToDecide) {
  auto r = Parse(R"({"prompt": "a cat", "n": null, "size": "auto", "seed": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 1u);
  EXPECT_FALSE(r->has_seed);
  EXPECT_FALSE(r->request.has_seed());  // the validator draws one per image
  EXPECT_EQ(r->request.width(), 0u);    // 0: the model's default
  EXPECT_EQ(r->request.height(), 0u);
  EXPECT_EQ(r->request.num_inference_steps(), 0u);
  EXPECT_FALSE(r->request.has_guidance_scale());
  const auto images = ExpandImages(*r);
  ASSERT_EQ(images.size(), 1u);
  EXPECT_FALSE(images[0].has_seed());
  // Any model name passes while the served one is not known yet (Serve then answers 503).
  EXPECT_TRUE(Parse(R"({"prompt": "x", "model": "dall-e-3"})", 10, "").ok());
}

TEST(OpenAIImagesRequest, RefusesMalformedBodiesSayingWhy) {
  EXPECT_TRUE(absl::StartsWith(ErrorOf("{\"prompt\": ", ""), "the request body is not valid JSON"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("{\"prompt\": ", ""), "line 1"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("[1, 2]", ""), "must be a JSON object, got an array"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("", ""), "not valid JSON"));
}

TEST(OpenAIImagesRequest, RefusesWrongTypesNamingTheField) {
  EXPECT_EQ(ErrorOf(R"({"prompt": 5})", "prompt"), "prompt must be a string, got an integer");
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"({"prompt": "x", "n": "2"})", "n"),
                                "n must be an integer in 1..10, got a string"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"({"prompt": "x", "n": 1.5})", "n"),
                                "got a number with a fraction"));
  EXPECT_TRUE(
      absl::StrContains(ErrorOf(R"({"prompt": "x", "seed": -1})", "seed"), "seed must be in 0.."));
  EXPECT_TRUE(
      absl::StrContains(ErrorOf(R"({"prompt": "x", "guidance_scale": "high"})", "guidance_scale"),
                        "guidance_scale must be a number, got a string"));
  EXPECT_TRUE(absl::StrContains(
      ErrorOf(R"({"prompt": "x", "true_cfg_scale": true})", "true_cfg_scale"), "got a boolean"));
  EXPECT_TRUE(absl::StrContains(
      ErrorOf(R"({"prompt": "x", "negative_prompt": ["a"]})", "negative_prompt"), "got an array"));
  EXPECT_TRUE(absl::StrContains(ErrorOf(R"({"prompt": "x", "size": 1024})", "size"),
                                "size must be a string"));
}

TEST(OpenAIImagesRequest, RefusesBadValuesNamingTheFieldAndTheLimit) {
  EXPECT_EQ(ErrorOf(R"({"n": 1})", "prompt"), "prompt is required");
  EXPECT_EQ(ErrorOf(R"({"prompt": ""})", "prompt"), "prompt must not be empty");
  for (const char* size : {"1024", "1024x", "x1024", "10x10x10", "0x64", "64x0", "-64x64",
                           "64 x 64", "123456x64", "1024X1024"}) {
    const std::string m = ErrorOf(Json{{"prompt", "x"}, {"size", size}}.dump(), "size");
    EXPECT_TRUE(absl::StartsWith(m, "size must be \"WIDTHxHEIGHT\" in pixels"))
        << size << ": " << m;
  }
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "n": 0})", "n"),
            "n must be in 1..10, got 0 (at most 10 images a call, and no more than the admission "
            "queue holds)");
  EXPECT_TRUE(
      absl::StartsWith(ErrorOf(R"({"prompt": "x", "n": 11})", "n"), "n must be in 1..10, got 11"));
  // --max-queue 4: n is at most 4.
  EXPECT_TRUE(
      absl::StartsWith(ErrorOf(R"({"prompt": "x", "n": 5})", "n", 4), "n must be in 1..4, got 5"));
  EXPECT_TRUE(absl::StartsWith(
      ErrorOf(R"({"prompt": "x", "num_inference_steps": 0})", "num_inference_steps"),
      "num_inference_steps must be in 1..200, got 0"));
  EXPECT_TRUE(absl::StartsWith(
      ErrorOf(R"({"prompt": "x", "num_inference_steps": 201})", "num_inference_steps"),
      "num_inference_steps must be in 1..200, got 201"));
  // The last seed of the call must fit: 2^64 - 1 is fine alone, not with n = 2.
  EXPECT_TRUE(Parse(R"({"prompt": "x", "seed": 18446744073709551615})").ok());
  EXPECT_TRUE(
      absl::StartsWith(ErrorOf(R"({"prompt": "x", "n": 2, "seed": 18446744073709551615})", "seed"),
                       "seed must be in 0..18446744073709551614"));
  EXPECT_TRUE(absl::StartsWith(ErrorOf(R"({"prompt": "x", "model": "dall-e-3"})", "model"),
                               "model \"dall-e-3\" is not served here: this server serves "
                               "\"flux1-tiny\""));
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "output_format": "gif"})", "output_format"),
            "output_format must be one of \"png\", \"jpeg\", \"webp\", got \"gif\"");
}

TEST(OpenAIImagesRequest, UrlResponsesAreAskedForAndUnknownFormatsRefused) {
  auto url = Parse(R"({"prompt": "x", "response_format": "url"})");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_TRUE(url->url);  // whether the server keeps images is the transport's to say
  auto b64 = Parse(R"({"prompt": "x", "response_format": "b64_json"})");
  ASSERT_TRUE(b64.ok()) << b64.status();
  EXPECT_FALSE(b64->url);
  EXPECT_FALSE(Parse(R"({"prompt": "x"})")->url);
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "response_format": "png"})", "response_format"),
            "response_format must be \"b64_json\" or \"url\", got \"png\"");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "response_format": 1})", "response_format"),
            "response_format must be a string, got an integer");
}

TEST(OpenAIImagesRequest, OutputFormatsAndCompression) {
  struct Case {
    const char* name;
    v1::OutputFormat format;
  };
  for (const Case& c : {Case{"png", v1::OUTPUT_FORMAT_PNG}, Case{"jpeg", v1::OUTPUT_FORMAT_JPEG},
                        Case{"webp", v1::OUTPUT_FORMAT_WEBP}}) {
    auto r =
        Parse(Json{{"prompt", "x"}, {"output_format", c.name}, {"output_compression", 55}}.dump());
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(r->output_format, c.name);
    EXPECT_EQ(r->request.output_format(), c.format) << c.name;
    EXPECT_TRUE(r->request.has_output_compression());
    EXPECT_EQ(r->request.output_compression(), 55u);
  }
  auto plain = Parse(R"({"prompt": "x", "output_format": null, "output_compression": null})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->output_format, "png");
  EXPECT_EQ(plain->request.output_format(), v1::OUTPUT_FORMAT_PNG);
  EXPECT_FALSE(plain->request.has_output_compression());  // the validator's default: 100
  EXPECT_TRUE(Parse(R"({"prompt": "x", "output_format": "jpeg", "output_compression": 0})").ok());
  EXPECT_TRUE(Parse(R"({"prompt": "x", "output_format": "jpeg", "output_compression": 100})").ok());
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "output_compression": 101})", "output_compression"),
            "output_compression must be in 0..100, got 101");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "output_compression": -1})", "output_compression"),
            "output_compression must be in 0..100, got -1");
  EXPECT_TRUE(absl::StartsWith(
      ErrorOf(R"({"prompt": "x", "output_compression": 50.5})", "output_compression"),
      "output_compression must be an integer in 0..100"));
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "output_format": "JPEG"})", "output_format"),
            "output_format must be one of \"png\", \"jpeg\", \"webp\", got \"JPEG\"");
}

TEST(OpenAIImagesRequest, BackgroundIsOpaqueTransparentIsRefused) {
  for (const char* b : {"auto", "opaque"}) {
    EXPECT_TRUE(Parse(Json{{"prompt", "x"}, {"background", b}}.dump()).ok()) << b;
  }
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "background": "transparent"})", "background"),
            "background \"transparent\" is not supported: the models make opaque RGB images (no "
            "alpha channel); ask for \"opaque\" or \"auto\"");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "background": "white"})", "background"),
            "background must be one of \"auto\", \"opaque\", got \"white\"");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "background": false})", "background"),
            "background must be a string, got a boolean");
}

TEST(OpenAIImagesRequest, StyleModerationAndUserAreAcceptedWithoutEffect) {
  auto r = Parse(R"({"prompt": "x", "style": "vivid", "moderation": "low", "user": "user-1234"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->user, "user-1234");  // logged with the request id by the transport
  auto plain = Parse(R"({"prompt": "x"})");
  ASSERT_TRUE(plain.ok());
  // No effect: the GenerateRequest is the one without them.
  EXPECT_EQ(r->request.SerializeAsString(), plain->request.SerializeAsString());
  EXPECT_TRUE(Parse(R"({"prompt": "x", "style": "natural", "moderation": "auto"})").ok());
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "style": "photo"})", "style"),
            "style must be one of \"vivid\", \"natural\", got \"photo\"");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "moderation": "none"})", "moderation"),
            "moderation must be one of \"low\", \"auto\", got \"none\"");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "user": 7})", "user"),
            "user must be a string, got an integer");
  // input_fidelity is the edit form's.
  EXPECT_TRUE(
      absl::StartsWith(ErrorOf(R"({"prompt": "x", "input_fidelity": "high"})", "input_fidelity"),
                       "unknown field \"input_fidelity\""));
}

TEST(OpenAIImagesRequest, QualityLevelsAreCheckedAndKept) {
  for (const char* q : {"auto", "low", "medium", "high", "standard", "hd"}) {
    auto r = Parse(Json{{"prompt", "x"}, {"quality", q}}.dump());
    ASSERT_TRUE(r.ok()) << q << ": " << r.status();
    EXPECT_EQ(r->quality, q);
    EXPECT_EQ(r->request.num_inference_steps(), 0u);  // steps come from ApplyQuality
  }
  EXPECT_EQ(Parse(R"({"prompt": "x"})")->quality, "auto");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "quality": "ultra"})", "quality"),
            "quality must be one of \"auto\", \"low\", \"medium\", \"high\", \"standard\", "
            "\"hd\", got \"ultra\"");
}

// The steps ApplyQuality sets for `body` with the default presets and a model default of `steps`.
uint32_t StepsFor(const std::string& body, uint32_t model_steps,
                  const QualitySteps& presets = QualitySteps(),
                  const RequestLimits& limits = RequestLimits()) {
  auto r = ParseImagesRequest(body, "", 10, limits);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return 9999;
  ApplyQuality(presets, model_steps, limits, &*r);
  return r->request.num_inference_steps();
}

TEST(OpenAIImagesRequest, QualityBecomesStepsFromThePresets) {
  // Defaults: low = 0.5x, medium = 1x, high = 1.5x the model's default steps; hd = high.
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "low"})", 28), 14u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "medium"})", 28), 28u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "high"})", 28), 42u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "hd"})", 28), 42u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "low"})", 1), 1u);  // at least one step
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "low"})", 3), 2u);  // rounded
  // auto and standard: 0, the model's (or --default-steps') default.
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "auto"})", 28), 0u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "standard"})", 28), 0u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x"})", 28), 0u);
  // The request's own steps win.
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "high", "num_inference_steps": 5})", 28), 5u);
  // Operator presets: absolute counts, kept within the step limits.
  auto presets = ParseQualitySteps("low=4,high=60");
  ASSERT_TRUE(presets.ok()) << presets.status();
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "low"})", 28, *presets), 4u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "medium"})", 28, *presets), 28u);  // default
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "high"})", 28, *presets), 60u);
  RequestLimits limits;
  limits.max_steps = 50;
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "high"})", 28, *presets, limits), 50u);
  // Model not loaded yet: factors cannot be applied (Serve answers 503 anyway).
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "high"})", 0), 0u);
  EXPECT_EQ(StepsFor(R"({"prompt": "x", "quality": "low"})", 0, *presets), 4u);
}

TEST(OpenAIImagesRequest, QualityStepsFlagIsParsedAndChecked) {
  auto d = ParseQualitySteps("low=0.5x,medium=1x,high=1.5x");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->low, (QualityPreset{0, 0.5}));
  EXPECT_EQ(d->medium, (QualityPreset{0, 1.0}));
  EXPECT_EQ(d->high, (QualityPreset{0, 1.5}));
  auto mixed = ParseQualitySteps(" high = 50 , low=0.25x");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->high.steps, 50u);
  EXPECT_DOUBLE_EQ(mixed->low.factor, 0.25);
  EXPECT_EQ(mixed->medium, (QualityPreset{0, 1.0}));
  EXPECT_TRUE(ParseQualitySteps("").ok());
  for (const char* bad : {"ultra=5", "low", "low=", "low=0", "low=1001", "low=0x", "low=11x",
                          "low=abc", "low=2,low=3", "hd=40"}) {
    auto r = ParseQualitySteps(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--quality-steps")) << r.status();
  }
}

TEST(OpenAIImagesRequest, NamedSizesArePixelSizes) {
  for (const char* size :
       {"1024x1024", "1536x1024", "1024x1536", "256x256", "512x512", "1792x1024", "1024x1792"}) {
    auto r = Parse(Json{{"prompt", "x"}, {"size", size}}.dump());
    ASSERT_TRUE(r.ok()) << size << ": " << r.status();
    EXPECT_EQ(absl::StrCat(r->request.width(), "x", r->request.height()), size);
  }
}

TEST(OpenAIImagesRequest, RefusesUnknownFieldsNamingThem) {
  const std::string m = ErrorOf(R"({"prompt": "x", "num_steps": 4})", "num_steps");
  EXPECT_TRUE(absl::StartsWith(m, "unknown field \"num_steps\"")) << m;
}

TEST(OpenAIImagesRequest, StreamAsksForPartialImagesAsPreviews) {
  auto r = Parse(R"({"prompt": "x", "stream": true, "partial_images": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->partial_images, 2u);
  EXPECT_EQ(r->request.preview_images(), 2u);
  // Without stream, partial_images asks for nothing (OpenAI ignores it too).
  auto plain = Parse(R"({"prompt": "x", "partial_images": 3})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->stream);
  EXPECT_EQ(plain->request.preview_images(), 0u);
  EXPECT_TRUE(
      absl::StrContains(ErrorOf(R"({"prompt": "x", "stream": "yes"})", "stream"), "boolean"));
  EXPECT_TRUE(absl::StrContains(
      ErrorOf(R"({"prompt": "x", "stream": true, "partial_images": 4})", "partial_images"),
      "0..3"));
  EXPECT_TRUE(
      absl::StrContains(ErrorOf(R"({"prompt": "x", "stream": true, "n": 2})", "n"), "stream"));
  EXPECT_TRUE(absl::StrContains(
      ErrorOf(R"({"prompt": "x", "stream": true, "response_format": "url"})", "response_format"),
      "stream"));
}

TEST(OpenAIImagesRequest, MapsLorasToTheGenerateRequest) {
  auto r = Parse(R"({"prompt": "a cat", "n": 2, "seed": 1,
                     "loras": [{"name": "style", "scale": 0.8}, {"name": "detail"},
                               {"name": "anime", "scale": null}, {"scale": -1, "name": "x"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::GenerateRequest& g = r->request;
  ASSERT_EQ(g.loras_size(), 4);
  EXPECT_EQ(g.loras(0).name(), "style");  // as sent: the validator sorts and checks them
  EXPECT_TRUE(g.loras(0).has_scale());
  EXPECT_FLOAT_EQ(g.loras(0).scale(), 0.8f);
  EXPECT_EQ(g.loras(1).name(), "detail");
  EXPECT_FALSE(g.loras(1).has_scale());  // absent: 1.0
  EXPECT_EQ(g.loras(2).name(), "anime");
  EXPECT_FALSE(g.loras(2).has_scale());  // null: absent
  EXPECT_EQ(g.loras(3).name(), "x");
  EXPECT_FLOAT_EQ(g.loras(3).scale(), -1.0f);
  // Every image of the call applies the same adapters.
  for (const v1::GenerateRequest& image : ExpandImages(*r)) EXPECT_EQ(image.loras_size(), 4);

  auto none = Parse(R"({"prompt": "a cat", "loras": []})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->request.loras_size(), 0);
  auto null = Parse(R"({"prompt": "a cat", "loras": null})");
  ASSERT_TRUE(null.ok()) << null.status();
  EXPECT_EQ(null->request.loras_size(), 0);
}

TEST(OpenAIImagesRequest, RefusesMalformedLorasNamingTheField) {
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": "style"})", "loras"),
            "loras must be an array of {\"name\": string, \"scale\": number} objects, got a "
            "string");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": {"name": "style"}})", "loras"),
            "loras must be an array of {\"name\": string, \"scale\": number} objects, got an "
            "object");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": ["style"]})", "loras"),
            "loras[0] must be an object {\"name\": string, \"scale\": number}, got a string");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": [{"name": "a"}, {"name": 3}]})", "loras"),
            "loras[1].name must be a string, got an integer");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": [{"name": "a", "scale": "0.8"}]})", "loras"),
            "loras[0].scale must be a number, got a string");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": [{"scale": 0.8}]})", "loras"),
            "loras[0].name is required");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": [{"name": ""}]})", "loras"),
            "loras[0].name is required");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "loras": [{"name": "a", "weight": 0.8}]})", "loras"),
            "loras[0] has an unknown field \"weight\" (an adapter is {\"name\", \"scale\"})");
}

// An edit form: (name, content) parts; names starting with "image" or "mask" are files.
std::vector<FormPart> Form(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<FormPart> parts;
  for (const auto& [name, content] : fields) {
    FormPart p;
    p.name = name;
    p.content = content;
    if (absl::StartsWith(name, "image") || name == "mask") {
      p.filename = name + ".png";
      p.content_type = "image/png";
    }
    parts.push_back(std::move(p));
  }
  return parts;
}

absl::StatusOr<ImagesRequest> ParseEdit(const std::vector<std::pair<std::string, std::string>>& f,
                                        uint32_t max_n = 10) {
  return ParseImageEditRequest(Form(f), "flux2-tiny", max_n, RequestLimits());
}

// The edit form's parse error: its message, which must name `param` as OpenAI's param.
std::string EditErrorOf(const std::vector<std::pair<std::string, std::string>>& f,
                        const std::string& param, uint32_t max_n = 10) {
  auto r = ParseEdit(f, max_n);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(ParamFor(r.status()), param) << r.status();
  return std::string(r.status().message());
}

TEST(OpenAIImageEditRequest, ImagePartsGoInTheirOrderWhateverTheirName) {
  // `image` and `image[]` may be mixed: the bytes keep the order of the parts, undecoded.
  auto r = ParseEdit({{"image", "first"},
                      {"prompt", "make it blue"},
                      {"image[]", "second"},
                      {"image", std::string("third\0bytes", 11)}});
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::GenerateRequest& g = r->request;
  ASSERT_EQ(g.images_size(), 3);
  EXPECT_EQ(g.images(0), "first");
  EXPECT_EQ(g.images(1), "second");
  EXPECT_EQ(g.images(2), std::string("third\0bytes", 11));
  EXPECT_EQ(g.prompt(), "make it blue");
  // size absent: 0 x 0, the model's default (FLUX.2: the first image's size).
  EXPECT_EQ(g.width(), 0u);
  EXPECT_EQ(g.height(), 0u);
  EXPECT_EQ(g.strength(), 0.0f);  // absent: the model's default
  EXPECT_EQ(g.output_format(), v1::OUTPUT_FORMAT_PNG);

  // The openai clients' array form alone.
  auto array = ParseEdit({{"prompt", "x"}, {"image[]", "a"}, {"image[]", "b"}});
  ASSERT_TRUE(array.ok()) << array.status();
  ASSERT_EQ(array->request.images_size(), 2);
  EXPECT_EQ(array->request.images(0), "a");
  EXPECT_EQ(array->request.images(1), "b");
}

TEST(OpenAIImageEditRequest, StreamIsAFormFieldToo) {
  auto r = ParseEdit(
      {{"prompt", "a cat"}, {"image", "png"}, {"stream", "true"}, {"partial_images", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->request.preview_images(), 1u);
  auto off = ParseEdit({{"prompt", "a cat"}, {"image", "png"}, {"stream", "false"}});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->stream);
  auto bad = ParseEdit({{"prompt", "a cat"}, {"image", "png"}, {"stream", "yes"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ParamFor(bad.status()), "stream") << bad.status();
}

TEST(OpenAIImageEditRequest, TextFieldsMapAsTheJsonBodysDo) {
  auto r = ParseEdit({{"model", "flux2-tiny"},
                      {"prompt", "a cat"},
                      {"image", "png"},
                      {"n", "2"},
                      {"size", "96x64"},
                      {"response_format", "b64_json"},
                      {"output_format", "png"},
                      {"user", "someone"},
                      {"seed", "41"},
                      {"num_inference_steps", "6"},
                      {"guidance_scale", "2.5"},
                      {"true_cfg_scale", "4"},
                      {"negative_prompt", "blurry"},
                      {"strength", "0.75"},
                      {"loras", R"([{"name": "style", "scale": 0.8}])"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "flux2-tiny");
  EXPECT_EQ(r->n, 2u);
  EXPECT_TRUE(r->has_seed);
  const v1::GenerateRequest& g = r->request;
  EXPECT_EQ(g.width(), 96u);
  EXPECT_EQ(g.height(), 64u);
  EXPECT_EQ(g.seed(), 41u);
  EXPECT_EQ(g.num_inference_steps(), 6u);
  EXPECT_FLOAT_EQ(g.guidance_scale(), 2.5f);
  EXPECT_FLOAT_EQ(g.true_cfg_scale(), 4.0f);
  EXPECT_EQ(g.negative_prompt(), "blurry");
  EXPECT_FLOAT_EQ(g.strength(), 0.75f);
  ASSERT_EQ(g.loras_size(), 1);
  EXPECT_EQ(g.loras(0).name(), "style");
  EXPECT_FLOAT_EQ(g.loras(0).scale(), 0.8f);
  // Every image of the call edits the same inputs, seed + i.
  const auto images = ExpandImages(*r);
  ASSERT_EQ(images.size(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(images[i].seed(), 41u + i);
    ASSERT_EQ(images[i].images_size(), 1);
    EXPECT_EQ(images[i].images(0), "png");
  }
  // "auto" and the openai client's "null" text leave the server to decide.
  auto defaults = ParseEdit({{"prompt", "x"},
                             {"image", "a"},
                             {"size", "auto"},
                             {"n", "null"},
                             {"seed", "null"},
                             {"strength", "null"}});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->n, 1u);
  EXPECT_FALSE(defaults->has_seed);
  EXPECT_EQ(defaults->request.width(), 0u);
  EXPECT_EQ(defaults->request.strength(), 0.0f);
}

TEST(OpenAIImageEditRequest, OpenAIsOtherEditFieldsMapAsForGenerations) {
  auto r = ParseEdit({{"prompt", "a cat"},
                      {"image", "png"},
                      {"output_format", "webp"},
                      {"output_compression", "70"},
                      {"quality", "low"},
                      {"background", "opaque"},
                      {"input_fidelity", "high"},
                      {"response_format", "url"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.output_format(), v1::OUTPUT_FORMAT_WEBP);
  EXPECT_EQ(r->request.output_compression(), 70u);
  EXPECT_EQ(r->quality, "low");
  EXPECT_TRUE(r->url);
  EXPECT_EQ(
      EditErrorOf({{"prompt", "x"}, {"image", "a"}, {"background", "transparent"}}, "background"),
      "background \"transparent\" is not supported: the models make opaque RGB images (no "
      "alpha channel); ask for \"opaque\" or \"auto\"");
  EXPECT_EQ(
      EditErrorOf({{"prompt", "x"}, {"image", "a"}, {"input_fidelity", "max"}}, "input_fidelity"),
      "input_fidelity must be one of \"high\", \"low\", got \"max\"");
  EXPECT_EQ(EditErrorOf({{"prompt", "x"}, {"image", "a"}, {"output_compression", "high"}},
                        "output_compression"),
            "output_compression must be an integer in 0..100, got a string");
}

TEST(OpenAIImageEditRequest, RefusesAMissingPromptOrImageAndAMask) {
  EXPECT_EQ(EditErrorOf({{"image", "a"}}, "prompt"), "prompt is required");
  EXPECT_EQ(EditErrorOf({{"image", "a"}, {"prompt", ""}}, "prompt"), "prompt must not be empty");
  EXPECT_TRUE(absl::StartsWith(EditErrorOf({{"prompt", "x"}}, "image"), "image is required"));
  EXPECT_TRUE(
      absl::StartsWith(EditErrorOf({{"prompt", "x"}, {"image", "a"}, {"mask", "m"}}, "mask"),
                       "mask: inpainting is not supported"));
}

TEST(OpenAIImageEditRequest, RefusesBadValuesNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> ok = {{"prompt", "x"}, {"image", "a"}};
  auto with = [&](const std::string& name, const std::string& value) {
    auto f = ok;
    f.emplace_back(name, value);
    return f;
  };
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("n", "0"), "n"), "n must be in 1..10, got 0"));
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("n", "5"), "n", 4), "n must be in 1..4, got 5"));
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("n", "two"), "n"),
                               "n must be an integer in 1..10, got a string"));
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("n", "1.5"), "n"),
                               "n must be an integer in 1..10, got a number with a fraction"));
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("size", "64by64"), "size"),
                               "size must be \"WIDTHxHEIGHT\" in pixels"));
  EXPECT_EQ(EditErrorOf(with("response_format", "URL"), "response_format"),
            "response_format must be \"b64_json\" or \"url\", got \"URL\"");
  EXPECT_EQ(EditErrorOf(with("output_format", "gif"), "output_format"),
            "output_format must be one of \"png\", \"jpeg\", \"webp\", got \"gif\"");
  EXPECT_EQ(EditErrorOf(with("quality", "best"), "quality"),
            "quality must be one of \"auto\", \"low\", \"medium\", \"high\", \"standard\", "
            "\"hd\", got \"best\"");
  EXPECT_EQ(EditErrorOf(with("guidance_scale", "high"), "guidance_scale"),
            "guidance_scale must be a number, got a string");
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("num_inference_steps", "0"), "num_inference_steps"),
                               "num_inference_steps must be in 1..200, got 0"));
  EXPECT_TRUE(absl::StartsWith(EditErrorOf(with("model", "dall-e-2"), "model"),
                               "model \"dall-e-2\" is not served here"));
  EXPECT_EQ(EditErrorOf(with("strength", "0"), "strength"), "strength must be in (0, 1], got 0");
  EXPECT_EQ(EditErrorOf(with("strength", "1.5"), "strength"),
            "strength must be in (0, 1], got 1.5");
  EXPECT_EQ(EditErrorOf(with("strength", "most"), "strength"),
            "strength must be a number, got a string");
  EXPECT_EQ(EditErrorOf(with("loras", "style"), "loras"),
            "loras must be an array of {\"name\": string, \"scale\": number} objects, got a "
            "string");
  // The openai npm client's encoding of an array of objects is refused, saying what to send.
  EXPECT_TRUE(absl::StrContains(EditErrorOf(with("loras[][name]", "style"), "loras"),
                                "send loras as one text field holding the JSON array"));
  EXPECT_EQ(EditErrorOf(with("prompt", "again"), "prompt"), "prompt is given twice");
}

TEST(OpenAIImageEditRequest, RefusesUnknownFieldsAsGenerationsDo) {
  for (const char* field : {"steps", "aspect_ratio", "negative"}) {
    const std::string m = EditErrorOf({{"prompt", "x"}, {"image", "a"}, {field, "auto"}}, field);
    EXPECT_TRUE(absl::StartsWith(m, absl::StrCat("unknown field \"", field, "\""))) << m;
    // The same field in a generations body gets the same answer.
    const std::string g = ErrorOf(Json{{"prompt", "x"}, {field, "auto"}}.dump(), field);
    EXPECT_EQ(g, m);
  }
  // strength is the edit form's: a generations body does not know it.
  EXPECT_TRUE(absl::StartsWith(ErrorOf(R"({"prompt": "x", "strength": 0.5})", "strength"),
                               "unknown field \"strength\""));
}

// ditserve's cache_threshold (GenerateRequest.cache_threshold): a number in the JSON body and the
// edit form, set only when given (absent or null: the server's default), its range the validator's.
TEST(OpenAIImagesRequest, CacheThresholdIsAnExtraNumberSetOnlyWhenGiven) {
  auto on = Parse(R"({"prompt": "x", "cache_threshold": 0.12})");
  ASSERT_TRUE(on.ok()) << on.status();
  ASSERT_TRUE(on->request.has_cache_threshold());
  EXPECT_EQ(on->request.cache_threshold(), 0.12);  // a double: unchanged
  auto off = Parse(R"({"prompt": "x", "cache_threshold": 0})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->request.has_cache_threshold()) << "0 turns the cache off, unlike absent";
  EXPECT_EQ(off->request.cache_threshold(), 0.0);
  for (const char* body : {R"({"prompt": "x"})", R"({"prompt": "x", "cache_threshold": null})"}) {
    auto absent = Parse(body);
    ASSERT_TRUE(absent.ok()) << absent.status();
    EXPECT_FALSE(absent->request.has_cache_threshold()) << body;
  }
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "cache_threshold": "high"})", "cache_threshold"),
            "cache_threshold must be a number, got a string");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "cache_threshold": true})", "cache_threshold"),
            "cache_threshold must be a number, got a boolean");
  // Every image of a call asks for the same.
  auto n = Parse(R"({"prompt": "x", "n": 2, "cache_threshold": 0.2})");
  ASSERT_TRUE(n.ok()) << n.status();
  for (const v1::GenerateRequest& image : ExpandImages(*n)) {
    EXPECT_EQ(image.cache_threshold(), 0.2);
  }
  // The edit form: the number's text.
  auto edit = ParseEdit({{"prompt", "x"}, {"image", "a"}, {"cache_threshold", "0.08"}});
  ASSERT_TRUE(edit.ok()) << edit.status();
  EXPECT_EQ(edit->request.cache_threshold(), 0.08);
  auto edit_null = ParseEdit({{"prompt", "x"}, {"image", "a"}, {"cache_threshold", "null"}});
  ASSERT_TRUE(edit_null.ok()) << edit_null.status();
  EXPECT_FALSE(edit_null->request.has_cache_threshold());
  EXPECT_EQ(EditErrorOf({{"prompt", "x"}, {"image", "a"}, {"cache_threshold", "some"}},
                        "cache_threshold"),
            "cache_threshold must be a number, got a string");
  // The validator's range errors name it too.
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError(
                "cache_threshold must be in 0..1 (ModelInfo.step_cache.max_threshold), got 2")),
            "cache_threshold");
}

TEST(OpenAIImagesRequest, MaxSequenceLengthIsAnExtraWithinTheLimit) {
  auto r = Parse(R"({"prompt": "x", "max_sequence_length": 64})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.max_sequence_length(), 64u);
  auto absent = Parse(R"({"prompt": "x"})");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->request.max_sequence_length(), 0u) << "the model's default";
  // RequestLimits' max_sequence_length (512) and 0, which the wire reads as "the default".
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "max_sequence_length": 0})", "max_sequence_length"),
            "max_sequence_length must be in 1..512, got 0");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "max_sequence_length": 513})", "max_sequence_length"),
            "max_sequence_length must be in 1..512, got 513");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "max_sequence_length": "64"})", "max_sequence_length"),
            "max_sequence_length must be an integer in 1..512, got a string");
  // The edit form: the number's text.
  auto edit = ParseEdit({{"prompt", "x"}, {"image", "a"}, {"max_sequence_length", "32"}});
  ASSERT_TRUE(edit.ok()) << edit.status();
  EXPECT_EQ(edit->request.max_sequence_length(), 32u);
}

TEST(OpenAIImagesResponse, IsOpenAIsShapeWithBase64Images) {
  v1::GenerateResponse a, b;
  a.set_image(std::string("\x89PNG\r\n\x1a\n\0a", 10));
  a.set_seed(7);
  b.set_image("second");
  b.set_seed(8);
  const Json j = Json::parse(ImagesResponseJson({a, b}, 1700000000));
  EXPECT_EQ(j["created"], 1700000000);
  ASSERT_EQ(j["data"].size(), 2u);
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(j["data"][0]["b64_json"].get<std::string>(), &decoded));
  EXPECT_EQ(decoded, a.image());
  EXPECT_EQ(j["data"][0]["seed"], 7);
  ASSERT_TRUE(absl::Base64Unescape(j["data"][1]["b64_json"].get<std::string>(), &decoded));
  EXPECT_EQ(decoded, "second");
  EXPECT_EQ(j["data"][1]["seed"], 8);
  // OpenAI's response fields: defaults.
  EXPECT_EQ(j["output_format"], "png");
  EXPECT_EQ(j["background"], "opaque");
  EXPECT_EQ(j["quality"], "auto");
}

TEST(OpenAIImagesStream, EventsAreOpenAIsServerSentEvents) {
  auto data_of = [](const std::string& frame, const std::string& event) {
    const std::string head = "event: " + event + "\ndata: ";
    EXPECT_TRUE(absl::StartsWith(frame, head)) << frame.substr(0, 80);
    EXPECT_TRUE(absl::EndsWith(frame, "\n\n"));
    return Json::parse(frame.substr(head.size(), frame.size() - head.size() - 2));
  };
  ImagesResponseInfo info;
  info.output_format = "jpeg";
  info.quality = "hd";
  v1::Progress p;
  p.set_preview(std::string("not a png"));
  p.set_preview_index(1);
  const Json partial =
      data_of(PartialImageEvent("image_edit", p, info, 1700000000), "image_edit.partial_image");
  EXPECT_EQ(partial["type"], "image_edit.partial_image");
  EXPECT_EQ(partial["partial_image_index"], 1);
  EXPECT_EQ(partial["output_format"], "png");  // previews are PNGs whatever the result's format
  EXPECT_EQ(partial["quality"], "high");
  EXPECT_EQ(partial["created_at"], 1700000000);
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(partial["b64_json"].get<std::string>(), &decoded));
  EXPECT_EQ(decoded, "not a png");
  v1::GenerateResponse r;
  r.set_image("jpeg bytes");
  r.set_width(64);
  r.set_height(32);
  r.set_seed(9);
  const Json done = data_of(CompletedEvent("image_generation", r, info, 1700000001),
                            "image_generation.completed");
  EXPECT_EQ(done["size"], "64x32");
  EXPECT_EQ(done["output_format"], "jpeg");
  EXPECT_EQ(done["seed"], 9);
  EXPECT_EQ(done["usage"]["total_tokens"], 0);
  const Json error = data_of(ErrorEvent(absl::DeadlineExceededError("too slow")), "error");
  EXPECT_EQ(error["error"]["type"], "timeout_error");
}

TEST(OpenAIImagesResponse, SaysItsFormatQualityAndSizeAndGivesUrlsWhenAsked) {
  v1::GenerateResponse a, b;
  a.set_image("jpeg bytes");
  a.set_seed(7);
  a.set_width(96);
  a.set_height(64);
  b = a;
  b.set_seed(8);
  ImagesResponseInfo info;
  info.output_format = "jpeg";
  info.quality = "hd";
  info.urls = {"http://h:1/v1/images/files/img_1.jpeg", "http://h:1/v1/images/files/img_2.jpeg"};
  const Json j = Json::parse(ImagesResponseJson({a, b}, 5, info));
  EXPECT_EQ(j["output_format"], "jpeg");
  EXPECT_EQ(j["quality"], "high");  // hd is high
  EXPECT_EQ(j["size"], "96x64");    // WIDTHxHEIGHT
  EXPECT_EQ(j["background"], "opaque");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["url"], info.urls[0]);
  EXPECT_EQ(j["data"][1]["url"], info.urls[1]);
  EXPECT_FALSE(j["data"][0].contains("b64_json"));
  EXPECT_EQ(j["data"][1]["seed"], 8);
  info.quality = "standard";
  EXPECT_EQ(Json::parse(ImagesResponseJson({a}, 5, info))["quality"], "auto");
  EXPECT_EQ(ContentTypeOf("png"), "image/png");
  EXPECT_EQ(ContentTypeOf("jpeg"), "image/jpeg");
  EXPECT_EQ(ContentTypeOf("webp"), "image/webp");
}

TEST(OpenAIModels, ListTheServedModel) {
  v1::ModelInfo info;
  info.set_name("flux1-tiny");
  const Json list = Json::parse(ModelsListJson(info, 42));
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], "flux1-tiny");
  EXPECT_EQ(list["data"][0]["object"], "model");
  EXPECT_EQ(list["data"][0]["created"], 42);
  EXPECT_EQ(list["data"][0]["owned_by"], "ditserve");
  EXPECT_EQ(list["data"][0]["loras"], Json::array());           // no adapters loaded
  EXPECT_EQ(list["data"][0]["image_inputs"]["max_images"], 0);  // takes no input image
  EXPECT_EQ(Json::parse(ModelJson(info, 42)), list["data"][0]);
}

TEST(OpenAIModels, SayWhichInputImagesTheModelTakes) {
  v1::ModelInfo info;
  info.set_name("flux2-tiny");
  v1::ImageInputs* in = info.mutable_inputs()->mutable_image_inputs();
  in->set_max_images(10);
  in->set_use("reference");
  in->set_min_side(64);
  in->set_max_area(1024 * 1024);
  in->set_size_multiple(16);
  in->set_max_image_bytes(32 << 20);
  const Json model = Json::parse(ModelJson(info, 42));
  EXPECT_EQ(model["image_inputs"]["max_images"], 10);
  EXPECT_EQ(model["image_inputs"]["use"], "reference");
  EXPECT_EQ(model["image_inputs"]["min_side"], 64);
  EXPECT_EQ(model["image_inputs"]["max_area"], 1024 * 1024);
  EXPECT_EQ(model["image_inputs"]["size_multiple"], 16);
  EXPECT_EQ(model["image_inputs"]["max_image_bytes"], 32 << 20);
  EXPECT_EQ(model["image_inputs"]["default_strength"], 0.0);
  EXPECT_EQ(model["image_inputs"]["min_images"], 0);  // a request may bring none

  in->set_use("qwen_edit");
  in->set_max_images(3);
  in->set_min_images(1);
  const Json edit = Json::parse(ModelJson(info, 42));
  EXPECT_EQ(edit["image_inputs"]["use"], "qwen_edit");
  EXPECT_EQ(edit["image_inputs"]["min_images"], 1);
  EXPECT_EQ(edit["image_inputs"]["max_images"], 3);
}

TEST(OpenAIModels, ListTheLoadedLoraAdapters) {
  v1::ModelInfo info;
  info.set_name("flux1-tiny");
  v1::LoraInfo* style = info.add_loras();
  style->set_name("style");
  style->set_format("diffusers");
  style->set_rank(4);
  style->set_modules(50);
  v1::LoraInfo* detail = info.add_loras();
  detail->set_name("detail");
  detail->set_format("kohya");
  detail->set_rank(2);
  detail->set_modules(22);
  const Json model = Json::parse(ModelJson(info, 42));
  EXPECT_EQ(model["loras"],
            Json::parse(R"([{"name": "style", "format": "diffusers", "rank": 4, "modules": 50},
                            {"name": "detail", "format": "kohya", "rank": 2, "modules": 22}])"));
  EXPECT_EQ(Json::parse(ModelsListJson(info, 42))["data"][0], model);
}

TEST(OpenAIErrors, OneMappingFromStatusToHttp) {
  struct Case {
    absl::Status status;
    int http;
    const char* type;
    const char* code;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("height must be ..."), 400, "invalid_request_error",
       "invalid_argument"},
      {absl::UnauthenticatedError("no token"), 401, "authentication_error", "unauthenticated"},
      {absl::PermissionDeniedError("no"), 403, "permission_error", "permission_denied"},
      {absl::NotFoundError("no model"), 404, "not_found_error", "not_found"},
      {absl::ResourceExhaustedError("admission queue is full"), 429, "rate_limit_error",
       "resource_exhausted"},
      {absl::UnavailableError("server is shutting down"), 503, "server_error", "unavailable"},
      {absl::DeadlineExceededError("deadline exceeded after 0.4 s"), 504, "timeout_error",
       "deadline_exceeded"},
      {absl::InternalError("boom"), 500, "server_error", "internal"},
      {absl::CancelledError("cancelled"), 500, "server_error", "cancelled"},
      {absl::UnknownError("?"), 500, "server_error", "unknown"},
  };
  for (const Case& c : cases) {
    const HttpError e = HttpErrorFor(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status;
    EXPECT_EQ(e.type, c.type) << c.status;
    EXPECT_EQ(e.code, c.code) << c.status;
    EXPECT_EQ(WantsRetryAfter(c.status), c.http == 429 || c.http == 503) << c.status;
  }
}

TEST(OpenAIErrors, ParamNamesTheFieldTheMessageStartsWith) {
  // The request validator's messages (server/request_validator.cc) start with the field.
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("height must be a multiple of 16 in 16..2048")),
            "size");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("width must be a multiple of 16 in 16..2048")),
            "size");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("prompt is 9000 bytes; the limit is 8192 bytes")),
            "prompt");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("guidance_scale must be in 0..30, got 31")),
            "guidance_scale");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("true_cfg_scale must be in 0..30, got 40")),
            "true_cfg_scale");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("negative_prompt is not valid UTF-8")),
            "negative_prompt");
  // LoRA choices: the whole `loras` field, whichever entry (the validator's messages too).
  EXPECT_EQ(
      ParamFor(absl::InvalidArgumentError("loras[1].name: no adapter named 'x'; loaded: style")),
      "loras");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("loras[0].scale must be in -4..4, got 5")),
            "loras");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("loras has 5 entries; the limit is 4 per request")),
            "loras");
  // Serve's input image errors name images[i]: the edit form's `image` field.
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("images[1]: not a PNG, JPEG or WebP image")),
            "image");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("images: flux1-tiny takes no input image")),
            "image");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("strength must be in (0, 1], got 2")), "strength");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("the request body is not valid JSON")), "");
  EXPECT_EQ(ParamFor(absl::InvalidArgumentError("prompt_embeddings is required: ...")), "");
  // Only invalid input has a param.
  EXPECT_EQ(ParamFor(absl::ResourceExhaustedError("prompt queue")), "");
}

TEST(OpenAIErrors, ErrorBodyIsOpenAIsErrorObject) {
  const Json j = Json::parse(ErrorJson(absl::InvalidArgumentError("n must be in 1..10, got 0")));
  EXPECT_EQ(j["error"]["message"], "n must be in 1..10, got 0");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_EQ(j["error"]["code"], "invalid_argument");
  const Json none = Json::parse(ErrorJson(absl::UnavailableError("loading")));
  EXPECT_TRUE(none["error"]["param"].is_null());
  EXPECT_EQ(none["error"]["code"], "unavailable");
  // Invalid UTF-8 quoted from a request does not break the body.
  const Json bad = Json::parse(ErrorJson(absl::InternalError(std::string("bad \xff byte"))));
  EXPECT_TRUE(absl::StartsWith(bad["error"]["message"].get<std::string>(), "bad "));
}

}  // namespace
}  // namespace ditserve::server::openai

namespace ditserve::server {
namespace {

std::shared_ptr<PendingRequest> Make(const std::string& id) {
  ValidatedRequest v;
  v.shape.height = 64;
  v.shape.width = 64;
  v.shape.steps = 4;
  return std::make_shared<PendingRequest>(id, v, Clock::now() + std::chrono::seconds(60));
}

TEST(AdmissionQueuePushAll, AdmitsAllOrNone) {
  AdmissionQueue q(3);
  ASSERT_TRUE(q.Push(Make("a")).ok());
  const absl::Status s = q.PushAll({Make("b"), Make("c"), Make("d")});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "no room for 3 more")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "queue length 3")) << s;
  EXPECT_EQ(q.size(), 1u);  // none of them was queued
  ASSERT_TRUE(q.PushAll({Make("b"), Make("c")}).ok());
  EXPECT_EQ(q.size(), 3u);
}

TEST(AdmissionQueuePushAll, TheImagesOfOneCallFormOneBatch) {
  AdmissionQueue q(8);
  ASSERT_TRUE(q.PushAll({Make("r.0"), Make("r.1"), Make("r.2")}).ok());
  auto batch = q.PopBatch(3);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0]->id(), "r.0");
  EXPECT_EQ(batch[1]->id(), "r.1");
  EXPECT_EQ(batch[2]->id(), "r.2");
}

TEST(AdmissionQueuePushAll, RefusedOnceClosed) {
  AdmissionQueue q(8);
  q.Close(absl::UnavailableError("server is shutting down"));
  EXPECT_EQ(q.PushAll({Make("a"), Make("b")}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ditserve::server
