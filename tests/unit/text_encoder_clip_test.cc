// CLIPTextModel against the reference: FLUX.1's pooled prompt embedding of prompt 0, plus the
// pooling rule, causality, checkpoint-name layouts and error paths.
#include <gtest/gtest.h>

#include <iostream>

#include "models/text/clip_text_model.h"
#include "tests/support/fixtures.h"
#include "tests/support/text_encoder_fixtures.h"
#include "tests/support/timing.h"

namespace ditserve::text {
namespace {

using ::ditserve::testing::CastWeights;
using ::ditserve::testing::ClipTextEncoderConfig;
using ::ditserve::testing::ClipTextEncoderDir;
using ::ditserve::testing::ClipTextEncoderWeights;
using ::ditserve::testing::LoadComponentEdited;
using ::ditserve::testing::Ref;
using ::ditserve::testing::RelativeError;

TEST(ClipTextModel, ConfigFromFixture) {
  ClipTextConfig c = ClipTextEncoderConfig();
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.hidden_act, Activation::kQuickGelu);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-5);
  EXPECT_FALSE(ParseClipTextConfig("[1, 2]").ok());
  EXPECT_FALSE(ParseClipTextConfig(R"({"hidden_act": "tanhshrink"})").ok());
  EXPECT_FALSE(ParseClipTextConfig(R"({"hidden_size": 30, "num_attention_heads": 4})").ok());
  EXPECT_FALSE(LoadClipTextConfig(ClipTextEncoderDir() + "/no_such.json").ok());
}

TEST(ClipTextModel, PooledOutputMatchesFluxPipeline) {
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), ClipTextEncoderWeights());
  ASSERT_TRUE(model.ok()) << model.status();
  auto ids = Ref("clip.ids.0").unsqueeze(0);
  auto out = model->Forward(ids);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->last_hidden_state.sizes(), (torch::IntArrayRef{1, 77, 32}));
  auto ref = Ref("flux1.pooled_prompt_embeds");
  ASSERT_EQ(out->pooler_output.sizes(), ref.sizes());
  const double err = RelativeError(out->pooler_output, ref);
  EXPECT_LT(err, 1e-4);

  const auto ms =
      ::ditserve::testing::MeanMillis(20, [&] { return model->Forward(ids).status(); });
  ASSERT_TRUE(ms.ok()) << ms.status();
  std::cout << "[timing] CLIP forward (1x77, tiny, cpu f32): " << *ms << " ms; rel err " << err
            << "\n";
}

TEST(ClipTextModel, BatchRowsAreIndependent) {
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), ClipTextEncoderWeights());
  ASSERT_TRUE(model.ok()) << model.status();
  auto ids = torch::stack({Ref("clip.ids.2"), Ref("clip.ids.0")});
  auto out = model->Forward(ids);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LT(RelativeError(out->pooler_output[1], Ref("flux1.pooled_prompt_embeds")[0]), 1e-4);
}

TEST(ClipTextModel, AttentionIsCausal) {
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), ClipTextEncoderWeights());
  ASSERT_TRUE(model.ok()) << model.status();
  auto ids = Ref("clip.ids.2").unsqueeze(0).clone();
  auto changed = ids.clone();
  changed[0][10] = (changed[0][10].item<int64_t>() + 1) % 768;
  auto a = model->Forward(ids), b = model->Forward(changed);
  ASSERT_TRUE(a.ok() && b.ok());
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(a->last_hidden_state.index({0, Slice(0, 10)}),
                           b->last_hidden_state.index({0, Slice(0, 10)})));
  EXPECT_FALSE(torch::allclose(a->last_hidden_state.index({0, Slice(10)}),
                               b->last_hidden_state.index({0, Slice(10)})));
}

TEST(ClipTextModel, PoolingRuleFollowsEosTokenId) {
  auto ids = torch::tensor({{5, 700, 9, 42, 9, 3}}, torch::kLong);
  // Legacy (eos_token_id == 2): the position of the highest id.
  auto legacy = ClipTextModel::Create(ClipTextEncoderConfig(), ClipTextEncoderWeights());
  ASSERT_TRUE(legacy.ok());
  auto out = legacy->Forward(ids);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::equal(out->pooler_output[0], out->last_hidden_state[0][1]));
  // Any other eos id: its first occurrence.
  ClipTextConfig c = ClipTextEncoderConfig();
  c.eos_token_id = 9;
  auto modern = ClipTextModel::Create(c, ClipTextEncoderWeights());
  ASSERT_TRUE(modern.ok());
  out = modern->Forward(ids);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::equal(out->pooler_output[0], out->last_hidden_state[0][2]));
}

TEST(ClipTextModel, AcceptsTextModelPrefixedCheckpoint) {
  auto prefixed = LoadComponentEdited(ClipTextEncoderDir(), [](auto& t) {
    std::map<std::string, torch::Tensor> renamed;
    for (auto& [k, v] : t) renamed["text_model." + k] = v;
    t = std::move(renamed);
  });
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), prefixed);
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = model->Forward(Ref("clip.ids.0").unsqueeze(0));
  ASSERT_TRUE(out.ok());
  EXPECT_LT(RelativeError(out->pooler_output, Ref("flux1.pooled_prompt_embeds")), 1e-4);
}

TEST(ClipTextModel, MissingTensorIsNamed) {
  auto sd = LoadComponentEdited(ClipTextEncoderDir(),
                                [](auto& t) { t.erase("encoder.layers.1.mlp.fc2.weight"); });
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), sd);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("encoder.layers.1.mlp.fc2.weight"), std::string::npos)
      << model.status();
}

TEST(ClipTextModel, MisShapedTensorIsNamed) {
  auto sd = LoadComponentEdited(ClipTextEncoderDir(),
                                [](auto& t) { t["final_layer_norm.bias"] = torch::zeros({31}); });
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), sd);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("final_layer_norm.bias"), std::string::npos);
}

TEST(ClipTextModel, RejectsBadInputIds) {
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), ClipTextEncoderWeights());
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->Forward(torch::tensor({{1, 768}}, torch::kLong)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(torch::tensor({{-1, 3}}, torch::kLong)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(model->Forward(torch::zeros({1, 78}, torch::kLong)).ok());  // > 77 positions
  EXPECT_FALSE(model->Forward(torch::zeros({77}, torch::kLong)).ok());     // not (B, S)
  EXPECT_FALSE(model->Forward(torch::zeros({1, 5}, torch::kFloat)).ok());
  EXPECT_FALSE(model->Forward(torch::Tensor()).ok());
}

TEST(ClipTextModel, RunsInBfloat16) {
  const auto bf16 = CastWeights(ClipTextEncoderWeights(), torch::kBFloat16);
  auto model = ClipTextModel::Create(ClipTextEncoderConfig(), bf16);
  ASSERT_TRUE(model.ok());
  auto out = model->Forward(Ref("clip.ids.0").unsqueeze(0));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->pooler_output.scalar_type(), torch::kBFloat16);
  EXPECT_LT(RelativeError(out->pooler_output, Ref("flux1.pooled_prompt_embeds")), 2e-2);
}

}  // namespace
}  // namespace ditserve::text
