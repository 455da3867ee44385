// T5EncoderModel against the reference: FLUX.1's prompt embeddings of prompt 0 (padded to the
// fixture call's max_sequence_length 32), plus relative-position buckets, config parsing and
// error paths.
#include <gtest/gtest.h>

#include <iostream>

#include "models/text/t5_encoder_model.h"
#include "models/text/t5_relative_position.h"
#include "tests/support/fixtures.h"
#include "tests/support/text_encoder_fixtures.h"
#include "tests/support/timing.h"

namespace ditserve::text {
namespace {

using ::ditserve::testing::CastWeights;
using ::ditserve::testing::LoadComponentEdited;
using ::ditserve::testing::Ref;
using ::ditserve::testing::RelativeError;
using ::ditserve::testing::T5EncoderConfig;
using ::ditserve::testing::T5EncoderDir;
using ::ditserve::testing::T5EncoderWeights;

TEST(T5Config, FeedForwardProjVariants) {
  T5Config c = T5EncoderConfig();
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.inner_dim(), 32);
  EXPECT_EQ(c.relative_attention_num_buckets, 8);
  EXPECT_EQ(c.relative_attention_max_distance, 20);
  EXPECT_TRUE(c.is_gated_act);
  EXPECT_EQ(c.dense_act, Activation::kGeluTanh);  // "gated-gelu" is gelu_new

  auto relu = ParseT5Config(R"({"feed_forward_proj": "relu"})");
  ASSERT_TRUE(relu.ok());
  EXPECT_FALSE(relu->is_gated_act);
  EXPECT_EQ(relu->dense_act, Activation::kRelu);
  auto gated_silu = ParseT5Config(R"({"feed_forward_proj": "gated-silu"})");
  ASSERT_TRUE(gated_silu.ok());
  EXPECT_TRUE(gated_silu->is_gated_act);
  EXPECT_EQ(gated_silu->dense_act, Activation::kSilu);
  EXPECT_FALSE(ParseT5Config(R"({"feed_forward_proj": "fancy-gelu"})").ok());
  EXPECT_FALSE(ParseT5Config(R"({"feed_forward_proj": "gated-gelu-x"})").ok());
  EXPECT_FALSE(ParseT5Config(R"({"d_model": "big"})").ok());
}

TEST(T5RelativePosition, BidirectionalBuckets) {
  // 8 buckets, max distance 20: 4 per direction, distances 0 and 1 exact, then log-spaced.
  auto forward = T5BidirectionalBuckets(1, 26, 8, 20, torch::kCPU)[0];  // key - query = 0..25
  std::vector<int64_t> fwd(forward.data_ptr<int64_t>(), forward.data_ptr<int64_t>() + 26);
  // 0 -> bucket 0; positive distances start at bucket 4: d=1 -> 5 (exact); d=2..6 -> 6
  // (floor(log(d/2)/log(10)*2) = 0, +2); d >= 7 -> 7 (the floor reaches 1, capped at the last).
  EXPECT_EQ(fwd[0], 0);
  EXPECT_EQ(fwd[1], 5);
  EXPECT_EQ(fwd[2], 6);
  EXPECT_EQ(fwd[6], 6);
  for (int d = 7; d < 26; ++d) EXPECT_EQ(fwd[d], 7) << d;
  auto backward = T5BidirectionalBuckets(26, 1, 8, 20, torch::kCPU).reshape({-1});  // -(0..25)
  EXPECT_EQ(backward[0].item<int64_t>(), 0);
  EXPECT_EQ(backward[1].item<int64_t>(), 1);
  EXPECT_EQ(backward[3].item<int64_t>(), 2);
  EXPECT_EQ(backward[25].item<int64_t>(), 3);
  // Monotone in distance within each direction, for a full-size table too (32 buckets, 128).
  auto big = T5BidirectionalBuckets(1, 512, 32, 128, torch::kCPU)[0];
  EXPECT_TRUE(torch::all(big.slice(0, 2).ge(big.slice(0, 1, 511))).item<bool>());
  EXPECT_EQ(big[511].item<int64_t>(), 31);
  EXPECT_EQ(big[7].item<int64_t>(), 16 + 7);  // max_exact = 8: distances < 8 are exact
}

TEST(T5EncoderModel, PromptEmbedsMatchFluxPipeline) {
  auto model = T5EncoderModel::Create(T5EncoderConfig(), T5EncoderWeights());
  ASSERT_TRUE(model.ok()) << model.status();
  auto ids = Ref("t5.ids.0").unsqueeze(0);
  auto out = model->Forward(ids);
  ASSERT_TRUE(out.ok()) << out.status();
  auto ref = Ref("flux1.prompt_embeds");
  ASSERT_EQ(out->sizes(), ref.sizes());
  const double err = RelativeError(*out, ref);
  EXPECT_LT(err, 1e-4);

  const auto ms =
      ::ditserve::testing::MeanMillis(20, [&] { return model->Forward(ids).status(); });
  ASSERT_TRUE(ms.ok()) << ms.status();
  std::cout << "[timing] T5 encoder forward (1x32, tiny, cpu f32): " << *ms << " ms; rel err "
            << err << "\n";
}

TEST(T5EncoderModel, PaddingIsAttendedTo) {
  // No attention mask: the padded and unpadded encodings of a prompt differ (as in diffusers).
  auto model = T5EncoderModel::Create(T5EncoderConfig(), T5EncoderWeights());
  ASSERT_TRUE(model.ok());
  auto unpadded = model->Forward(Ref("t5.ids_unpadded.0").unsqueeze(0));
  ASSERT_TRUE(unpadded.ok());
  EXPECT_EQ(unpadded->size(1), 19);
  EXPECT_GT(RelativeError(*unpadded, Ref("flux1.prompt_embeds").slice(1, 0, 19)), 1e-3);
}

TEST(T5EncoderModel, MissingTensorIsNamed) {
  const std::string name = "encoder.block.1.layer.1.DenseReluDense.wi_1.weight";
  auto model = T5EncoderModel::Create(
      T5EncoderConfig(), LoadComponentEdited(T5EncoderDir(), [&](auto& t) { t.erase(name); }));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find(name), std::string::npos) << model.status();

  const std::string bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
  model = T5EncoderModel::Create(
      T5EncoderConfig(), LoadComponentEdited(T5EncoderDir(), [&](auto& t) { t.erase(bias); }));
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(bias), std::string::npos) << model.status();
}

TEST(T5EncoderModel, NonGatedConfigNeedsSingleInputProjection) {
  T5Config c = T5EncoderConfig();
  c.is_gated_act = false;
  c.dense_act = Activation::kRelu;
  auto model = T5EncoderModel::Create(c, T5EncoderWeights());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("encoder.block.0.layer.1.DenseReluDense.wi.weight"),
            std::string::npos);
  // Given a "wi" (here the checkpoint's wi_0), the relu variant runs.
  auto sd = LoadComponentEdited(T5EncoderDir(), [](auto& t) {
    for (int i = 0; i < 2; ++i) {
      const std::string p = "encoder.block." + std::to_string(i) + ".layer.1.DenseReluDense.";
      t[p + "wi.weight"] = t[p + "wi_0.weight"];
    }
  });
  model = T5EncoderModel::Create(c, sd);
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = model->Forward(Ref("t5.ids.0").unsqueeze(0));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::isfinite(*out).all().item<bool>());
}

TEST(T5EncoderModel, AcceptsEmbedTokensName) {
  auto sd = LoadComponentEdited(T5EncoderDir(), [](auto& t) {
    t["encoder.embed_tokens.weight"] = t["shared.weight"];
    t.erase("shared.weight");
  });
  auto model = T5EncoderModel::Create(T5EncoderConfig(), sd);
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = model->Forward(Ref("t5.ids.0").unsqueeze(0));
  ASSERT_TRUE(out.ok());
  EXPECT_LT(RelativeError(*out, Ref("flux1.prompt_embeds")), 1e-4);
}

TEST(T5EncoderModel, RejectsOutOfVocabularyIds) {
  auto model = T5EncoderModel::Create(T5EncoderConfig(), T5EncoderWeights());
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->Forward(torch::tensor({{1, 250}}, torch::kLong)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(T5EncoderModel, RunsInBfloat16) {
  const auto bf16 = CastWeights(T5EncoderWeights(), torch::kBFloat16);
  auto model = T5EncoderModel::Create(T5EncoderConfig(), bf16);
  ASSERT_TRUE(model.ok());
  auto out = model->Forward(Ref("t5.ids.0").unsqueeze(0));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->scalar_type(), torch::kBFloat16);
  EXPECT_LT(RelativeError(*out, Ref("flux1.prompt_embeds")), 2e-2);
}

}  // namespace
}  // namespace ditserve::text
