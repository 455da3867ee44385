// LoRA file layouts (models/lora/lora_format.h): the diffusers / PEFT keys with the three sources
// of alpha, the kohya FLUX.1 keys as diffusers' _convert_kohya_flux_lora_to_diffusers maps them
// (fused q|k|v and linear1 split by rows, the final layer's swapped halves and ignored alpha), and
// every refusal naming the key.
#include <gtest/gtest.h>

#include <cmath>

#include "models/lora/lora_format.h"

namespace ditserve::lora {
namespace {

using sharding::DType;
using sharding::TensorMeta;

TensorMeta T(const std::string& name, std::vector<int64_t> shape) {
  return {name, DType::kF32, std::move(shape)};
}

const LoraTargetSource* Find(const LoraLayout& l, const std::string& module) {
  for (const auto& t : l.targets) {
    if (t.module == module) return &t;
  }
  return nullptr;
}

TEST(LoraFormatTest, DiffusersKeysWithoutAlphasHaveScaleOne) {
  auto l = MapLoraLayout({T("transformer.a.b.lora_A.weight", {4, 16}),
                          T("transformer.a.b.lora_B.weight", {32, 4}),
                          T("transformer.c.lora_A.weight", {2, 8}),
                          T("transformer.c.lora_B.weight", {8, 2})},
                         {}, nullptr, "f");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->format, LoraFormat::kDiffusers);
  ASSERT_EQ(l->targets.size(), 2u);
  const auto* ab = Find(*l, "a.b");
  ASSERT_NE(ab, nullptr);
  EXPECT_EQ(ab->rank, 4);
  EXPECT_EQ(ab->in_features, 16);
  EXPECT_EQ(ab->out_features, 32);
  EXPECT_EQ(ab->scale, 1.0);
  EXPECT_EQ(ab->a_key, "transformer.a.b.lora_A.weight");
  EXPECT_EQ(l->max_rank, 4);
}

TEST(LoraFormatTest, PeftPrefixAndBareKeys) {
  for (const std::string prefix : {"base_model.model.", ""}) {
    auto l = MapLoraLayout({T(prefix + "x.lora_A.weight", {2, 4}), T(prefix + "x.lora_B.weight", {4, 2})},
                           {}, nullptr, "f");
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_NE(Find(*l, "x"), nullptr) << prefix;
  }
}

TEST(LoraFormatTest, AdapterConfigGivesAlphaOverRankWithPatterns) {
  nlohmann::json config = {{"transformer.r", 4},
                           {"transformer.lora_alpha", 8},
                           {"transformer.rank_pattern", {{"blocks.1.proj", 2}}},
                           {"transformer.alpha_pattern", {{"ff.net.2", 3}}}};
  auto l = MapLoraLayout({T("transformer.blocks.0.attn.lora_A.weight", {4, 8}),
                          T("transformer.blocks.0.attn.lora_B.weight", {8, 4}),
                          T("transformer.blocks.1.proj.lora_A.weight", {2, 8}),
                          T("transformer.blocks.1.proj.lora_B.weight", {8, 2}),
                          T("transformer.blocks.0.ff.net.2.lora_A.weight", {4, 8}),
                          T("transformer.blocks.0.ff.net.2.lora_B.weight", {8, 4})},
                         {}, &config, "f");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_DOUBLE_EQ(Find(*l, "blocks.0.attn")->scale, 2.0);       // 8 / 4
  EXPECT_DOUBLE_EQ(Find(*l, "blocks.1.proj")->scale, 4.0);       // 8 / 2
  EXPECT_DOUBLE_EQ(Find(*l, "blocks.0.ff.net.2")->scale, 0.75);  // 3 / 4

  // rsLoRA: alpha / sqrt(r). Unprefixed config (PEFT's adapter_config.json).
  nlohmann::json rs = {{"r", 4}, {"lora_alpha", 8}, {"use_rslora", true}};
  auto r = MapLoraLayout({T("x.lora_A.weight", {4, 8}), T("x.lora_B.weight", {8, 4})}, {}, &rs, "f");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(Find(*r, "x")->scale, 4.0);

  // The config's rank must be the tensor's.
  nlohmann::json wrong = {{"r", 8}, {"lora_alpha", 8}};
  auto w = MapLoraLayout({T("x.lora_A.weight", {4, 8}), T("x.lora_B.weight", {8, 4})}, {}, &wrong, "f");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("rank 8"), std::string::npos) << w.status();
}

TEST(LoraFormatTest, NetworkAlphasPerModuleAndTheMostCommonForTheRest) {
  auto l = MapLoraLayout({T("transformer.a.lora_A.weight", {4, 8}), T("transformer.a.lora_B.weight", {8, 4}),
                          T("transformer.a.alpha", {}),
                          T("transformer.b.lora_A.weight", {2, 8}), T("transformer.b.lora_B.weight", {8, 2}),
                          T("transformer.b.alpha", {}),
                          T("transformer.c.lora_A.weight", {2, 8}), T("transformer.c.lora_B.weight", {8, 2}),
                          T("transformer.c.alpha", {}),
                          T("transformer.d.lora_A.weight", {2, 8}), T("transformer.d.lora_B.weight", {8, 2})},
                         {{"transformer.a.alpha", 1.0}, {"transformer.b.alpha", 3.0}, {"transformer.c.alpha", 3.0}},
                         nullptr, "f");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_DOUBLE_EQ(Find(*l, "a")->scale, 0.25);
  EXPECT_DOUBLE_EQ(Find(*l, "b")->scale, 1.5);
  EXPECT_DOUBLE_EQ(Find(*l, "d")->scale, 1.5);  // no alpha: the most common one (3)
}

TEST(LoraFormatTest, KohyaFusedLayersSplitAsDiffusersDoes) {
  const int64_t d = 8, mlp = 32, r = 2;
  auto l = MapLoraLayout(
      {T("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", {r, d}),
       T("lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", {3 * d, r}),
       T("lora_unet_double_blocks_0_img_attn_qkv.alpha", {}),
       T("lora_unet_single_blocks_1_linear1.lora_down.weight", {r, d}),
       T("lora_unet_single_blocks_1_linear1.lora_up.weight", {3 * d + mlp, r}),
       T("lora_unet_double_blocks_0_txt_mod_lin.lora_down.weight", {r, d}),
       T("lora_unet_double_blocks_0_txt_mod_lin.lora_up.weight", {6 * d, r}),
       T("lora_unet_final_layer_adaLN_modulation_1.lora_down.weight", {r, d}),
       T("lora_unet_final_layer_adaLN_modulation_1.lora_up.weight", {2 * d, r}),
       T("lora_unet_final_layer_adaLN_modulation_1.alpha", {}),
       T("lora_unet_img_in.lora_down.weight", {r, 4}),
       T("lora_unet_img_in.lora_up.weight", {d, r})},
      {{"lora_unet_double_blocks_0_img_attn_qkv.alpha", 1.0},
       {"lora_unet_final_layer_adaLN_modulation_1.alpha", 16.0}},
      nullptr, "f");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->format, LoraFormat::kKohyaFlux);
  const char* qkv[] = {"to_q", "to_k", "to_v"};
  for (int i = 0; i < 3; ++i) {
    const auto* t = Find(*l, std::string("transformer_blocks.0.attn.") + qkv[i]);
    ASSERT_NE(t, nullptr) << qkv[i];
    EXPECT_EQ(t->a_key, "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight");
    ASSERT_EQ(t->b_rows.size(), 1u);
    EXPECT_EQ(t->b_rows[0].begin, i * d);
    EXPECT_EQ(t->b_rows[0].end, (i + 1) * d);
    EXPECT_DOUBLE_EQ(t->scale, 0.5);  // alpha 1 / rank 2
  }
  const auto* mlp_part = Find(*l, "single_transformer_blocks.1.proj_mlp");
  ASSERT_NE(mlp_part, nullptr);
  EXPECT_EQ(mlp_part->b_rows[0].begin, 3 * d);
  EXPECT_EQ(mlp_part->out_features, mlp);
  EXPECT_EQ(Find(*l, "single_transformer_blocks.1.attn.to_v")->out_features, d);
  EXPECT_DOUBLE_EQ(Find(*l, "transformer_blocks.0.norm1_context.linear")->scale, 1.0);  // no alpha
  const auto* norm_out = Find(*l, "norm_out.linear");
  ASSERT_NE(norm_out, nullptr);
  ASSERT_EQ(norm_out->b_rows.size(), 2u);  // (shift, scale) → (scale, shift)
  EXPECT_EQ(norm_out->b_rows[0].begin, d);
  EXPECT_EQ(norm_out->b_rows[1].end, d);
  EXPECT_DOUBLE_EQ(norm_out->scale, 1.0);  // diffusers ignores the final layer's alpha
  EXPECT_NE(Find(*l, "x_embedder"), nullptr);
}

void ExpectRefused(const std::vector<TensorMeta>& tensors, const std::string& key_in_message,
                   const std::string& why) {
  auto l = MapLoraLayout(tensors, {}, nullptr, "adapter.safetensors");
  ASSERT_FALSE(l.ok()) << why;
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument) << why;
  EXPECT_NE(l.status().message().find(key_in_message), std::string::npos) << why << ": " << l.status();
  EXPECT_NE(l.status().message().find("adapter.safetensors"), std::string::npos) << l.status();
}

TEST(LoraFormatTest, RefusesWhatItCannotMapNamingTheKey) {
  ExpectRefused({T("transformer.x.lora_A.weight", {2, 4}), T("transformer.x.lora_B.weight", {4, 2}),
                 T("text_encoder.y.lora_A.weight", {2, 4})},
                "text_encoder.y.lora_A.weight", "text encoder");
  ExpectRefused({T("lora_unet_img_in.lora_down.weight", {2, 4}), T("lora_unet_img_in.lora_up.weight", {4, 2}),
                 T("lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", {2, 4})},
                "lora_te1_text_model", "kohya text encoder");
  ExpectRefused({T("transformer.x.lora_A.weight", {2, 4}), T("transformer.x.lora_B.weight", {4, 2}),
                 T("transformer.x.lora_magnitude_vector", {4})},
                "lora_magnitude_vector", "DoRA");
  ExpectRefused({T("transformer.x.lora_A.weight", {2, 4}), T("transformer.x.lora_B.weight", {4, 2}),
                 T("transformer.x.lora_B.bias", {4})},
                "lora_B.bias", "bias");
  ExpectRefused({T("transformer.x.lora_A.weight", {2, 4}), T("transformer.x.weird", {4, 2})},
                "transformer.x.weird", "unknown key");
  ExpectRefused({T("transformer.x.lora_A.weight", {2, 4})}, "transformer.x.lora_A.weight",
                "A without B");
  ExpectRefused({T("transformer.x.lora_A.weight", {2, 4}), T("transformer.x.lora_B.weight", {4, 3})},
                "transformer.x.lora_B.weight", "rank mismatch");
  ExpectRefused({T("lora_unet_img_in.lora_down.weight", {2, 4}), T("lora_unet_img_in.lora_up.weight", {4, 2}),
                 T("transformer.x.lora_A.weight", {2, 4})},
                "transformer.x.lora_A.weight", "mixed layouts");
  ExpectRefused({T("lora_unet_double_blocks_0_img_weird.lora_down.weight", {2, 4}),
                 T("lora_unet_double_blocks_0_img_weird.lora_up.weight", {4, 2})},
                "lora_unet_double_blocks_0_img_weird", "unknown kohya module");
  ExpectRefused({T("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", {2, 4}),
                 T("lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", {10, 2})},
                "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", "qkv not in thirds");
  auto empty = MapLoraLayout({}, {}, nullptr, "f");
  EXPECT_FALSE(empty.ok());
}

}  // namespace
}  // namespace ditserve::lora
