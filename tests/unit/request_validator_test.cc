// Request validation: every limit is enforced with INVALID_ARGUMENT naming the field and limit.
#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "server/request_validator.h"

namespace ditserve::server {
namespace {

worker::v1::ModelDescription Flux1() {
  worker::v1::ModelDescription m;
  m.set_name("flux1-tiny");
  m.set_family("flux1");
  m.mutable_inputs()->set_accepts_text_prompt(true);
  m.mutable_inputs()->add_prompt_embeds_shape(1);
  m.mutable_inputs()->add_prompt_embeds_shape(-1);
  m.mutable_inputs()->add_prompt_embeds_shape(32);
  m.mutable_inputs()->add_pooled_prompt_embeds_shape(1);
  m.mutable_inputs()->add_pooled_prompt_embeds_shape(32);
  m.mutable_defaults()->set_height(256);
  m.mutable_defaults()->set_width(256);
  m.mutable_defaults()->set_num_inference_steps(28);
  m.mutable_defaults()->set_guidance_scale(3.5f);
  m.mutable_defaults()->set_max_sequence_length(512);
  return m;
}

worker::v1::ModelDescription EmbeddingsOnly() {
  worker::v1::ModelDescription m;
  m.set_family("qwenimage");
  m.mutable_inputs()->set_requires_prompt_embeddings(true);
  m.mutable_inputs()->add_prompt_embeds_shape(1);
  m.mutable_inputs()->add_prompt_embeds_shape(-1);
  m.mutable_inputs()->add_prompt_embeds_shape(8);
  m.mutable_inputs()->set_accepts_text_mask(true);
  m.mutable_defaults()->set_height(64);
  m.mutable_defaults()->set_width(64);
  m.mutable_defaults()->set_num_inference_steps(4);
  m.mutable_defaults()->set_max_sequence_length(512);
  return m;
}

v1::Tensor Floats(std::vector<int64_t> shape, float value = 0.5f) {
  v1::Tensor t;
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_dtype(v1::DTYPE_FLOAT32);
  std::vector<float> data(n, value);
  t.set_data(data.data(), data.size() * 4);
  return t;
}

void ExpectInvalid(const v1::GenerateRequest& r, const std::string& needle,
                   const worker::v1::ModelDescription& m = Flux1()) {
  auto v = ValidateRequest(r, m, RequestLimits());
  ASSERT_FALSE(v.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find(needle), std::string::npos) << v.status();
}

TEST(RequestValidator, FillsDefaults) {
  v1::GenerateRequest r;
  r.set_prompt("a cat");
  auto v = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape.height, 256u);
  EXPECT_EQ(v->shape.width, 256u);
  EXPECT_EQ(v->shape.steps, 28u);
  EXPECT_EQ(v->shape.max_sequence_length, 512u);
  EXPECT_EQ(v->shape.output_format, v1::OUTPUT_FORMAT_PNG);
  EXPECT_FLOAT_EQ(v->item.guidance_scale(), 3.5f);
  EXPECT_EQ(v->item.prompt_2(), "a cat");  // T5 prompt defaults to the prompt
  EXPECT_FLOAT_EQ(v->item.true_cfg_scale(), 1.0f);
}

TEST(RequestValidator, KeepsExplicitValues) {
  v1::GenerateRequest r;
  r.set_prompt("a");
  r.set_prompt_2("b");
  r.set_height(512);
  r.set_width(768);
  r.set_num_inference_steps(4);
  r.set_guidance_scale(0.0f);
  r.set_seed(42);
  r.set_max_sequence_length(64);
  r.set_output_format(v1::OUTPUT_FORMAT_RAW_F32);
  auto v = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->item.seed(), 42u);
  EXPECT_EQ(v->item.prompt_2(), "b");
  EXPECT_FLOAT_EQ(v->item.guidance_scale(), 0.0f);
  EXPECT_EQ(v->shape.height, 512u);
  EXPECT_EQ(v->shape.width, 768u);
  EXPECT_EQ(v->shape.max_sequence_length, 64u);
}

TEST(RequestValidator, RejectsEachLimit) {
  v1::GenerateRequest base;
  base.set_prompt("a cat");
  {
    auto r = base;
    r.set_height(100);
    ExpectInvalid(r, "height must be a multiple of 16 in 16..2048, got 100");
  }
  {
    auto r = base;
    r.set_width(4096);
    ExpectInvalid(r, "width must be a multiple of 16 in 16..2048, got 4096");
  }
  {
    auto r = base;
    r.set_num_inference_steps(201);
    ExpectInvalid(r, "num_inference_steps must be in 1..200, got 201");
  }
  {
    auto r = base;
    r.set_guidance_scale(-1);
    ExpectInvalid(r, "guidance_scale must be in 0..30");
  }
  {
    auto r = base;
    r.set_guidance_scale(std::numeric_limits<float>::quiet_NaN());
    ExpectInvalid(r, "guidance_scale");
  }
  {
    auto r = base;
    r.set_max_sequence_length(513);
    ExpectInvalid(r, "max_sequence_length must be in 1..512, got 513");
  }
  {
    auto r = base;
    r.set_prompt(std::string(9000, 'x'));
    ExpectInvalid(r, "prompt is 9000 bytes; the limit is 8192 bytes");
  }
  {
    auto r = base;
    r.set_prompt("\xff\xfe");
    ExpectInvalid(r, "prompt is not valid UTF-8");
  }
  {
    v1::GenerateRequest r;
    ExpectInvalid(r, "prompt is required");
  }
  {
    auto r = base;
    r.set_output_format(static_cast<v1::OutputFormat>(17));
    ExpectInvalid(r, "output_format 17");
  }
  {
    auto r = base;
    r.set_request_id("has space");
    ExpectInvalid(r, "request_id must be printable");
  }
  {
    auto r = base;
    r.set_true_cfg_scale(100);
    ExpectInvalid(r, "true_cfg_scale must be in 0..30");
  }
}

TEST(RequestValidator, ChecksEmbeddingShapes) {
  v1::GenerateRequest r;
  *r.mutable_prompt_embeddings()->mutable_prompt_embeds() = Floats({1, 10, 8});
  auto ok = ValidateRequest(r, EmbeddingsOnly(), RequestLimits());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->shape.uses_embeddings);

  v1::GenerateRequest wrong_width = r;
  *wrong_width.mutable_prompt_embeddings()->mutable_prompt_embeds() = Floats({1, 10, 9});
  ExpectInvalid(wrong_width, "prompt_embeddings.prompt_embeds.shape[2] must be 8, got 9",
                EmbeddingsOnly());

  v1::GenerateRequest short_data = r;
  short_data.mutable_prompt_embeddings()->mutable_prompt_embeds()->mutable_data()->resize(12);
  ExpectInvalid(short_data, "prompt_embeddings.prompt_embeds.data must hold 320 bytes",
                EmbeddingsOnly());

  v1::GenerateRequest mask = r;
  *mask.mutable_prompt_embeddings()->mutable_text_mask() = Floats({1, 10}, 0.5f);
  ExpectInvalid(mask, "text_mask values must be 0 or 1", EmbeddingsOnly());

  v1::GenerateRequest none;
  none.set_prompt("text only");
  ExpectInvalid(none, "prompt_embeddings is required", EmbeddingsOnly());

  v1::GenerateRequest pooled_missing;
  *pooled_missing.mutable_prompt_embeddings()->mutable_prompt_embeds() = Floats({1, 7, 32});
  ExpectInvalid(pooled_missing, "pooled_prompt_embeds is required");
}

TEST(RequestValidator, RefusesOutputFormatsTheModelCannotProduce) {
  auto model = EmbeddingsOnly();
  model.mutable_inputs()->add_output_formats(v1::OUTPUT_FORMAT_LATENTS);
  v1::GenerateRequest r;
  *r.mutable_prompt_embeddings()->mutable_prompt_embeds() = Floats({1, 10, 8});
  r.set_output_format(v1::OUTPUT_FORMAT_PNG);
  ExpectInvalid(r, "output_format OUTPUT_FORMAT_PNG is not available for model family 'qwenimage' "
                   "(supported: OUTPUT_FORMAT_LATENTS)", model);
  r.set_output_format(v1::OUTPUT_FORMAT_LATENTS);
  EXPECT_TRUE(ValidateRequest(r, model, RequestLimits()).ok());
  // Unspecified means the model's own format when it cannot make images.
  r.clear_output_format();
  auto v = ValidateRequest(r, model, RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape.output_format, v1::OUTPUT_FORMAT_LATENTS);
  auto png = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_FALSE(png.ok());  // no prompt for FLUX.1, but the format is not what failed
  r.set_prompt("a");
  r.clear_prompt_embeddings();
  auto flux = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(flux.ok()) << flux.status();
  EXPECT_EQ(flux->shape.output_format, v1::OUTPUT_FORMAT_PNG);
}

TEST(RequestValidator, JpegAndWebpTakeTheirQualityIntoTheShape) {
  v1::GenerateRequest r;
  r.set_prompt("a cat");
  r.set_output_format(v1::OUTPUT_FORMAT_JPEG);
  auto v = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape.output_format, v1::OUTPUT_FORMAT_JPEG);
  EXPECT_EQ(v->shape.output_quality, 100u);  // absent: OpenAI's default, the best quality
  r.set_output_compression(40);
  auto q40 = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(q40.ok()) << q40.status();
  EXPECT_EQ(q40->shape.output_quality, 40u);
  EXPECT_FALSE(q40->shape == v->shape);  // another quality never shares a batch
  r.set_output_format(v1::OUTPUT_FORMAT_WEBP);
  r.set_output_compression(0);
  auto webp = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(webp.ok()) << webp.status();
  EXPECT_EQ(webp->shape.output_quality, 0u);
  // PNG ignores it (quality 0 in the shape, so it does not split PNG batches).
  r.set_output_format(v1::OUTPUT_FORMAT_PNG);
  r.set_output_compression(40);
  auto png = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->shape.output_quality, 0u);
  r.set_output_compression(101);
  ExpectInvalid(r, "output_compression must be in 0..100, got 101");
}

worker::v1::ModelDescription WithLoras(std::vector<std::string> names) {
  worker::v1::ModelDescription m = Flux1();
  for (const std::string& name : names) {
    v1::LoraInfo* info = m.add_loras();
    info->set_name(name);
    info->set_format("diffusers");
    info->set_rank(4);
    info->set_modules(10);
  }
  return m;
}

v1::GenerateRequest WithChoices(std::vector<std::pair<std::string, std::optional<float>>> choices) {
  v1::GenerateRequest r;
  r.set_prompt("a cat");
  for (const auto& [name, scale] : choices) {
    v1::LoraChoice* c = r.add_loras();
    c->set_name(name);
    if (scale) c->set_scale(*scale);
  }
  return r;
}

TEST(RequestValidatorLoras, CopiesChoicesSortedByNameWithEveryScaleSet) {
  const auto model = WithLoras({"style", "detail", "anime"});
  auto v = ValidateRequest(
      WithChoices({{"style", 0.8f}, {"anime", std::nullopt}, {"detail", -1.5f}}), model,
      RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->item.loras_size(), 3);
  EXPECT_EQ(v->item.loras(0).name(), "anime");
  EXPECT_TRUE(v->item.loras(0).has_scale());
  EXPECT_FLOAT_EQ(v->item.loras(0).scale(), 1.0f);  // absent scale = 1.0
  EXPECT_EQ(v->item.loras(1).name(), "detail");
  EXPECT_FLOAT_EQ(v->item.loras(1).scale(), -1.5f);  // negative weights are allowed
  EXPECT_EQ(v->item.loras(2).name(), "style");
  EXPECT_FLOAT_EQ(v->item.loras(2).scale(), 0.8f);
  using Loras = std::vector<std::pair<std::string, float>>;
  EXPECT_EQ(v->shape.loras, (Loras{{"anime", 1.0f}, {"detail", -1.5f}, {"style", 0.8f}}));

  // No choice: nothing in the item, an empty shape list (the unadapted model).
  auto none = ValidateRequest(WithChoices({}), model, RequestLimits());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->item.loras_size(), 0);
  EXPECT_TRUE(none->shape.loras.empty());
}

TEST(RequestValidatorLoras, OnlyTheSameSetSharesABatch) {
  const auto model = WithLoras({"a", "b", "c"});
  auto shape = [&](std::vector<std::pair<std::string, std::optional<float>>> choices) {
    auto v = ValidateRequest(WithChoices(std::move(choices)), model, RequestLimits());
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->shape : RequestShape();
  };
  const RequestShape ab = shape({{"a", 0.5f}, {"b", 1.0f}});
  // The same set in another order, and an absent scale for 1.0: equal.
  EXPECT_TRUE(ab == shape({{"b", std::nullopt}, {"a", 0.5f}}));
  EXPECT_TRUE(ab == shape({{"b", 1.0f}, {"a", 0.5f}}));
  // Another scale, another adapter, a subset, a superset, none: never the same batch.
  EXPECT_FALSE(ab == shape({{"a", 0.6f}, {"b", 1.0f}}));
  EXPECT_FALSE(ab == shape({{"a", 0.5f}, {"c", 1.0f}}));
  EXPECT_FALSE(ab == shape({{"a", 0.5f}}));
  EXPECT_FALSE(ab == shape({{"a", 0.5f}, {"b", 1.0f}, {"c", 1.0f}}));
  EXPECT_FALSE(ab == shape({}));
  EXPECT_FALSE(shape({}) == ab);
  EXPECT_TRUE(shape({}) == shape({}));
}

TEST(RequestValidatorLoras, RejectsEachRuleNamingTheEntry) {
  const auto model = WithLoras({"style", "detail"});
  ExpectInvalid(WithChoices({{"stlye", 1.0f}}),
                "loras[0].name: no adapter named 'stlye'; loaded: detail, style", model);
  ExpectInvalid(WithChoices({{"style", 1.0f}, {"nope", 1.0f}}),
                "loras[1].name: no adapter named 'nope'", model);
  ExpectInvalid(WithChoices({{"style", 1.0f}}),
                "loras[0].name: no adapter named 'style'; loaded: none (the server was started "
                "without --lora or --lora-dir)");
  ExpectInvalid(WithChoices({{"", 1.0f}}), "loras[0].name is required", model);
  ExpectInvalid(WithChoices({{"style", 0.5f}, {"detail", 1.0f}, {"style", 1.0f}}),
                "loras[2].name: 'style' is already chosen by loras[0]", model);
  // Unprintable bytes and long names are escaped and cut in the message.
  auto odd = ValidateRequest(WithChoices({{std::string("a\nb") + std::string(100, 'x'), 1.0f}}),
                             model, RequestLimits());
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("no adapter named 'a\\nbxxx"), std::string::npos)
      << odd.status();
  EXPECT_NE(odd.status().message().find("x...'; loaded"), std::string::npos) << odd.status();

  // Scales: |scale| <= --max-lora-scale (4 by default), finite.
  ExpectInvalid(WithChoices({{"style", 4.5f}}), "loras[0].scale must be in -4..4, got 4.5", model);
  ExpectInvalid(WithChoices({{"detail", 1.0f}, {"style", -5.0f}}),
                "loras[1].scale must be in -4..4, got -5", model);
  ExpectInvalid(WithChoices({{"style", std::numeric_limits<float>::quiet_NaN()}}),
                "loras[0].scale must be in -4..4, got nan", model);
  ExpectInvalid(WithChoices({{"style", std::numeric_limits<float>::infinity()}}),
                "loras[0].scale must be in -4..4", model);
  EXPECT_TRUE(ValidateRequest(WithChoices({{"style", 4.0f}, {"detail", -4.0f}}), model,
                              RequestLimits())
                  .ok());
  EXPECT_TRUE(ValidateRequest(WithChoices({{"style", 0.0f}}), model, RequestLimits()).ok());
  RequestLimits wide;
  wide.max_lora_scale = 8;
  EXPECT_TRUE(ValidateRequest(WithChoices({{"style", 7.5f}}), model, wide).ok());
  // The limit as ModelInfo publishes it (a float) is allowed.
  RequestLimits odd_limit;
  odd_limit.max_lora_scale = 0.3;
  EXPECT_TRUE(ValidateRequest(WithChoices({{"style", 0.3f}, {"detail", -0.3f}}), model, odd_limit)
                  .ok());
  EXPECT_FALSE(ValidateRequest(WithChoices({{"style", 0.31f}}), model, odd_limit).ok());
}

TEST(RequestValidatorLoras, AtMostMaxLorasPerRequest) {
  const auto model = WithLoras({"a", "b", "c", "d", "e"});
  EXPECT_TRUE(ValidateRequest(WithChoices({{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}, {"d", 1.0f}}),
                              model, RequestLimits())
                  .ok());
  ExpectInvalid(WithChoices({{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}, {"d", 1.0f}, {"e", 1.0f}}),
                "loras has 5 entries; the limit is 4 per request", model);
  RequestLimits one;
  one.max_loras_per_request = 1;
  auto v = ValidateRequest(WithChoices({{"a", 1.0f}, {"b", 1.0f}}), model, one);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("loras has 2 entries; the limit is 1"), std::string::npos);
}

TEST(RequestValidatorLoras, ModelInfoListsTheAdaptersAndTheLimits) {
  RequestLimits limits;
  limits.max_loras_per_request = 3;
  limits.max_lora_scale = 2.5;
  const v1::ModelInfo info = MakeModelInfo(WithLoras({"style", "detail"}), limits, 16, 1);
  ASSERT_EQ(info.loras_size(), 2);
  EXPECT_EQ(info.loras(0).name(), "style");  // as the workers reported them
  EXPECT_EQ(info.loras(0).format(), "diffusers");
  EXPECT_EQ(info.loras(0).rank(), 4u);
  EXPECT_EQ(info.loras(0).modules(), 10u);
  EXPECT_EQ(info.loras(1).name(), "detail");
  EXPECT_EQ(info.limits().max_loras_per_request(), 3u);
  EXPECT_FLOAT_EQ(info.limits().max_lora_scale(), 2.5f);
  const v1::ModelInfo plain = MakeModelInfo(Flux1(), RequestLimits(), 16, 1);
  EXPECT_EQ(plain.loras_size(), 0);
  EXPECT_EQ(plain.limits().max_loras_per_request(), 4u);
  EXPECT_FLOAT_EQ(plain.limits().max_lora_scale(), 4.0f);
}

TEST(RequestValidator, RandomSeedWhenAbsent) {
  v1::GenerateRequest r;
  r.set_prompt("a");
  auto a = ValidateRequest(r, Flux1(), RequestLimits());
  auto b = ValidateRequest(r, Flux1(), RequestLimits());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->item.seed(), b->item.seed());
}

}  // namespace
}  // namespace ditserve::server
