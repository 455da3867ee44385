// models/text: the decoder-only LLM text encoders (Mistral3ForConditionalGeneration for FLUX.2,
// Qwen2_5_VLForConditionalGeneration for Qwen-Image) under tensor parallelism through the
// production loader and the built-in plans.
//
//   * parity with transformers 5 (fixtures: flux2-tiny/qwenimage-tiny text_encoder and
//     reference.safetensors) at tp 1 and 2, tp 2 == tp 1, tp 4 refused for 2 key/value heads;
//   * config reading and refusals, tensor-name layouts, the text-model-only loading, inputs
//     (positions, masks), hidden-state indices, on random-weight checkpoints written here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "comm/local_communicator.h"
#include "models/text/causal_lm_config.h"
#include "models/text/causal_lm_encoder.h"
#include "models/text/causal_lm_inputs.h"
#include "models/text/causal_lm_loader.h"
#include "models/text/llm_prompt_embeds.h"
#include "models/text/llm_rope.h"
#include "sharding/checkpoint.h"
#include "sharding/plan_resolver.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"
#include "tests/unit/sharding_test_util.h"

namespace ditserve::text {
namespace {

using ::testing::HasSubstr;
using testing::FixturesDir;
using testing::Ref;
using testing::Reference;
using testing::RelativeError;
using testing::TempDir;

// ---------------------------------------------------------------------------------------------
// Running an encoder at tp 1 or on an in-process group.

struct RunResult {
  absl::Status status;
  std::vector<torch::Tensor> hidden;  // rank 0's
  bool ranks_agree = true;            // every rank returned bit-identical hidden states
  uint64_t bytes_total = 0;           // rank 0's progress total
};

RunResult RunEncoder(const std::string& dir, int world, const torch::Tensor& ids,
                     const torch::Tensor& mask, const std::vector<int64_t>& indices,
                     LlmAttentionImplementation impl = LlmAttentionImplementation::kSdpa) {
  RunResult out;
  std::mutex mu;
  std::map<int, std::vector<torch::Tensor>> per_rank;
  out.status = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    sharding::LoadOptions opts;
    uint64_t total = 0;
    opts.progress = [&](uint64_t, uint64_t t) { total = t; };
    auto loaded = LoadCausalLmTextEncoder(dir, &c, opts, impl);
    if (!loaded.ok()) return loaded.status();
    auto h = loaded->model->Forward(ids, mask, indices);
    if (!h.ok()) return h.status();
    std::lock_guard<std::mutex> lock(mu);
    per_rank[c.rank()] = *h;
    if (c.rank() == 0) out.bytes_total = total;
    return absl::OkStatus();
  });
  if (!out.status.ok()) return out;
  out.hidden = per_rank[0];
  for (const auto& [r, h] : per_rank) {
    for (size_t i = 0; i < h.size(); ++i) out.ranks_agree &= torch::equal(h[i], out.hidden[i]);
  }
  return out;
}

bool HasReference(const std::vector<std::string>& names) {
  if (!std::filesystem::exists(FixturesDir() + "/reference.safetensors")) return false;
  for (const auto& n : names) {
    if (!Reference().count(n)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Parity with transformers (fixtures).

std::string Flux2TextEncoderDir() { return FixturesDir() + "/flux2-tiny/text_encoder"; }
std::string QwenTextEncoderDir() { return FixturesDir() + "/qwenimage-tiny/text_encoder"; }

class Flux2MistralParity : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Flux2TextEncoderDir()) ||
        !HasReference({"flux2.pipe.input_ids", "flux2.te.hidden_states.30"})) {
      GTEST_SKIP() << "no FLUX.2 text encoder fixture under " << FixturesDir();
    }
  }
};

TEST_P(Flux2MistralParity, LeftPaddedHiddenStatesAndPromptEmbeds) {
  const int world = GetParam();
  const auto ids = Ref("flux2.pipe.input_ids");
  const auto mask = Ref("flux2.pipe.attention_mask");
  ASSERT_EQ(mask[0][0].item<int64_t>(), 0) << "the fixture prompt should be left-padded";
  auto run = RunEncoder(Flux2TextEncoderDir(), world, ids, mask, {0, 10, 20, 30});
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_TRUE(run.ranks_agree);
  const int64_t ks[] = {0, 10, 20, 30};
  for (size_t i = 0; i < 4; ++i) {
    const auto ref = Ref("flux2.te.hidden_states." + std::to_string(ks[i]));
    ASSERT_EQ(run.hidden[i].sizes(), ref.sizes());
    // Every position, pads included: the FLUX.2 transformer sees all of them.
    const double err = RelativeError(run.hidden[i], ref);
    EXPECT_LT(err, 1e-4) << "hidden_states[" << ks[i] << "]";
    RecordProperty("rel_err_hidden_states_" + std::to_string(ks[i]), absl::StrCat(err));
    const auto pads = mask[0].eq(0);
    EXPECT_LT(RelativeError(run.hidden[i][0].index({pads}), ref[0].index({pads})), 1e-4)
        << "pad positions of hidden_states[" << ks[i] << "]";
  }
  auto embeds = StackHiddenStatesPerToken({run.hidden[1], run.hidden[2], run.hidden[3]});
  ASSERT_TRUE(embeds.ok()) << embeds.status();
  EXPECT_LT(RelativeError(*embeds, Ref("flux2.pipe.prompt_embeds")), 1e-4);

  if (world > 1) {
    auto tp1 = RunEncoder(Flux2TextEncoderDir(), 1, ids, mask, {0, 10, 20, 30});
    ASSERT_TRUE(tp1.status.ok()) << tp1.status;
    for (size_t i = 0; i < 4; ++i) EXPECT_LT(RelativeError(run.hidden[i], tp1.hidden[i]), 1e-5);
  }
}

TEST_P(Flux2MistralParity, UnpaddedHiddenStates) {
  if (!HasReference({"flux2.te_unpadded.input_ids"})) GTEST_SKIP();
  const auto ids = Ref("flux2.te_unpadded.input_ids");
  auto run = RunEncoder(Flux2TextEncoderDir(), GetParam(), ids, torch::ones_like(ids),
                        {0, 10, 20, -3});
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_LT(RelativeError(run.hidden[0], Ref("flux2.te_unpadded.hidden_states.0")), 1e-4);
  EXPECT_LT(RelativeError(run.hidden[1], Ref("flux2.te_unpadded.hidden_states.10")), 1e-4);
  EXPECT_LT(RelativeError(run.hidden[2], Ref("flux2.te_unpadded.hidden_states.20")), 1e-4);
  // -3 of 33 hidden states is index 30.
  EXPECT_LT(RelativeError(run.hidden[3], Ref("flux2.te_unpadded.hidden_states.30")), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tp, Flux2MistralParity, ::testing::Values(1, 2));

TEST(Flux2MistralTp, DegreeFourIsRefusedForTwoKeyValueHeads) {
  if (!std::filesystem::exists(Flux2TextEncoderDir())) GTEST_SKIP();
  auto cfg = LoadCausalLmConfig(Flux2TextEncoderDir());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_EQ(cfg->num_attention_heads, 4);
  ASSERT_EQ(cfg->num_key_value_heads, 2);
  const auto ids = torch::zeros({1, 4}, torch::kLong);
  auto run = RunEncoder(Flux2TextEncoderDir(), 4, ids, torch::ones_like(ids), {0});
  ASSERT_FALSE(run.status.ok());
  EXPECT_EQ(run.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(run.status.message()),
              HasSubstr("number of attention heads (4) and the number of key/value heads (2)"));
}

TEST(Flux2MistralTp, VisionTowerAndLmHeadAreNotRead) {
  if (!std::filesystem::exists(Flux2TextEncoderDir())) GTEST_SKIP();
  auto ckpt = sharding::ComponentCheckpoint::Open(Flux2TextEncoderDir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  uint64_t text_bytes = 0, other_bytes = 0;
  for (const auto& [name, loc] : (*ckpt)->tensors()) {
    (name.rfind("language_model.model.", 0) == 0 ? text_bytes : other_bytes) += loc.info->nbytes();
  }
  ASSERT_GT(other_bytes, 0u);
  const auto ids = torch::zeros({1, 2}, torch::kLong);
  auto run = RunEncoder(Flux2TextEncoderDir(), 1, ids, {}, {0});
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.bytes_total, text_bytes);
}

class QwenParity : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(QwenTextEncoderDir()) ||
        !HasReference({"qwenimage.pipe.input_ids", "qwenimage.pipe.prompt_embeds"})) {
      GTEST_SKIP() << "no Qwen-Image text encoder fixture under " << FixturesDir();
    }
  }
};

TEST_P(QwenParity, LastHiddenStateAndPromptEmbeds) {
  const int world = GetParam();
  auto cfg = LoadCausalLmConfig(QwenTextEncoderDir());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const auto ids = Ref("qwenimage.pipe.input_ids");
  const auto mask = Ref("qwenimage.pipe.attention_mask");
  auto run = RunEncoder(QwenTextEncoderDir(), world, ids, mask, {-1});
  if (cfg->num_attention_heads % world != 0 || cfg->num_key_value_heads % world != 0) {
    ASSERT_FALSE(run.status.ok());
    EXPECT_THAT(std::string(run.status.message()), HasSubstr("key/value heads"));
    return;
  }
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_TRUE(run.ranks_agree);
  if (HasReference({"qwenimage.te.last_hidden_state"})) {
    EXPECT_LT(RelativeError(run.hidden[0], Ref("qwenimage.te.last_hidden_state")), 1e-4);
  }
  auto embeds = QwenImagePromptEmbeds(run.hidden[0], mask, 34, 512);
  ASSERT_TRUE(embeds.ok()) << embeds.status();
  const auto ref = Ref("qwenimage.pipe.prompt_embeds");
  ASSERT_EQ(embeds->first.sizes(), ref.sizes());
  EXPECT_LT(RelativeError(embeds->first, ref), 1e-4);
  if (HasReference({"qwenimage.pipe.prompt_embeds_mask"})) {
    EXPECT_TRUE(torch::equal(embeds->second, Ref("qwenimage.pipe.prompt_embeds_mask")));
  }
  if (HasReference({"qwenimage.pipe.negative_input_ids", "qwenimage.pipe.negative_prompt_embeds"})) {
    const auto nmask = Ref("qwenimage.pipe.negative_attention_mask");
    auto neg = RunEncoder(QwenTextEncoderDir(), world, Ref("qwenimage.pipe.negative_input_ids"),
                          nmask, {-1});
    ASSERT_TRUE(neg.status.ok()) << neg.status;
    auto ne = QwenImagePromptEmbeds(neg.hidden[0], nmask, 34, 512);
    ASSERT_TRUE(ne.ok()) << ne.status();
    EXPECT_LT(RelativeError(ne->first, Ref("qwenimage.pipe.negative_prompt_embeds")), 1e-4);
  }
  if (world > 1) {
    auto tp1 = RunEncoder(QwenTextEncoderDir(), 1, ids, mask, {-1});
    ASSERT_TRUE(tp1.status.ok()) << tp1.status;
    EXPECT_LT(RelativeError(run.hidden[0], tp1.hidden[0]), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, QwenParity, ::testing::Values(1, 2, 4));

// ---------------------------------------------------------------------------------------------
// Random-weight checkpoints written by the tests.

struct TinySpec {
  CausalLmFamily family = CausalLmFamily::kMistral3;
  std::string prefix = "model.language_model.";
  int64_t layers = 3, hidden = 32, heads = 4, kv = 2, head_dim = 16, inter = 48, vocab = 64;
  nlohmann::json sliding_window = nullptr;  // Mistral
  uint64_t seed = 7;
};

nlohmann::json TinyConfig(const TinySpec& s) {
  if (s.family == CausalLmFamily::kMistral3) {
    return {{"architectures", {"Mistral3ForConditionalGeneration"}},
            {"model_type", "mistral3"},
            {"text_config",
             {{"model_type", "mistral"}, {"hidden_size", s.hidden},
              {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kv},
              {"head_dim", s.head_dim}, {"intermediate_size", s.inter},
              {"num_hidden_layers", s.layers}, {"vocab_size", s.vocab}, {"rms_norm_eps", 1e-5},
              {"hidden_act", "silu"}, {"sliding_window", s.sliding_window},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e9}}}}},
            {"vision_config", {{"model_type", "pixtral"}, {"hidden_size", 8}}}};
  }
  // Qwen2.5-VL with the text fields at the top level (the older layout).
  return {{"architectures", {"Qwen2_5_VLForConditionalGeneration"}},
          {"model_type", "qwen2_5_vl"},
          {"hidden_size", s.hidden},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv},
          {"intermediate_size", s.inter},
          {"num_hidden_layers", s.layers},
          {"vocab_size", s.vocab},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1e6},
          {"use_sliding_window", false},
          {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {2, 1, 1}}}},
          {"vision_config", {{"hidden_size", 8}}}};
}

std::map<std::string, torch::Tensor> TinyTensors(const TinySpec& s) {
  torch::manual_seed(s.seed);
  const bool qwen = s.family == CausalLmFamily::kQwen25Vl;
  const int64_t hd = qwen ? s.hidden / s.heads : s.head_dim;
  auto w = [](std::vector<int64_t> shape, double scale) { return torch::randn(shape) * scale; };
  std::map<std::string, torch::Tensor> t;
  const std::string p = s.prefix;
  t[p + "embed_tokens.weight"] = w({s.vocab, s.hidden}, 1.0);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    t[l + "input_layernorm.weight"] = 1 + w({s.hidden}, 0.1);
    t[l + "post_attention_layernorm.weight"] = 1 + w({s.hidden}, 0.1);
    t[l + "self_attn.q_proj.weight"] = w({s.heads * hd, s.hidden}, 0.3);
    t[l + "self_attn.k_proj.weight"] = w({s.kv * hd, s.hidden}, 0.3);
    t[l + "self_attn.v_proj.weight"] = w({s.kv * hd, s.hidden}, 0.3);
    t[l + "self_attn.o_proj.weight"] = w({s.hidden, s.heads * hd}, 0.2);
    if (qwen) {
      t[l + "self_attn.q_proj.bias"] = w({s.heads * hd}, 0.1);
      t[l + "self_attn.k_proj.bias"] = w({s.kv * hd}, 0.1);
      t[l + "self_attn.v_proj.bias"] = w({s.kv * hd}, 0.1);
    }
    t[l + "mlp.gate_proj.weight"] = w({s.inter, s.hidden}, 0.2);
    t[l + "mlp.up_proj.weight"] = w({s.inter, s.hidden}, 0.2);
    t[l + "mlp.down_proj.weight"] = w({s.hidden, s.inter}, 0.2);
  }
  t[p + "norm.weight"] = 1 + w({s.hidden}, 0.1);
  // What the text encoder must never load.
  const std::string vision = qwen ? (p == "model." ? "visual." : "model.visual.")
                                  : (p == "language_model.model." ? "vision_tower." : "model.vision_tower.");
  t[vision + "blocks.0.attn.qkv.weight"] = w({24, 8}, 1.0);
  t[qwen || p == "model.language_model." ? "lm_head.weight" : "language_model.lm_head.weight"] =
      w({s.vocab, s.hidden}, 1.0);
  return t;
}

void WriteTiny(const std::string& dir, const TinySpec& s) {
  std::filesystem::create_directories(dir);
  testing::WriteTextFile(dir + "/config.json", TinyConfig(s).dump(2));
  testing::WriteTorchSafetensors(dir + "/model.safetensors", TinyTensors(s));
}

// (2, 7) ids: row 0 left-padded with 2 pads, row 1 full.
std::pair<torch::Tensor, torch::Tensor> PaddedBatch() {
  auto ids = torch::tensor({{0, 0, 5, 9, 13, 2, 40}, {3, 17, 8, 60, 1, 22, 31}}, torch::kLong);
  auto mask = torch::tensor({{0, 0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1}}, torch::kLong);
  return {ids, mask};
}

class TinyLlmTest : public ::testing::TestWithParam<CausalLmFamily> {
 protected:
  TinySpec Spec() const {
    TinySpec s;
    s.family = GetParam();
    return s;
  }
  TempDir tmp_;
};

TEST_P(TinyLlmTest, TensorParallelEqualsReplicated) {
  WriteTiny(tmp_.path(), Spec());
  auto [ids, mask] = PaddedBatch();
  auto tp1 = RunEncoder(tmp_.path(), 1, ids, mask, {0, 1, 2, 3});
  ASSERT_TRUE(tp1.status.ok()) << tp1.status;
  auto tp2 = RunEncoder(tmp_.path(), 2, ids, mask, {0, 1, 2, 3});
  ASSERT_TRUE(tp2.status.ok()) << tp2.status;
  EXPECT_TRUE(tp2.ranks_agree);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(tp1.hidden[i].sizes(), (std::vector<int64_t>{2, 7, 32}));
    EXPECT_FALSE(tp1.hidden[i].isnan().any().item<bool>());
    EXPECT_LT(RelativeError(tp2.hidden[i], tp1.hidden[i]), 1e-5) << "hidden_states[" << i << "]";
  }
  // tp 4 keeps 1 query head but half a key/value head per rank: refused.
  auto tp4 = RunEncoder(tmp_.path(), 4, ids, mask, {3});
  ASSERT_FALSE(tp4.status.ok());
  EXPECT_THAT(std::string(tp4.status.message()),
              HasSubstr("number of attention heads (4) and the number of key/value heads (2)"));
}

TEST_P(TinyLlmTest, OlderTensorLayoutGivesTheSameModel) {
  TinySpec s = Spec();
  WriteTiny(tmp_.File("new"), s);
  s.prefix = s.family == CausalLmFamily::kMistral3 ? "language_model.model." : "model.";
  WriteTiny(tmp_.File("old"), s);
  auto [ids, mask] = PaddedBatch();
  auto a = RunEncoder(tmp_.File("new"), 2, ids, mask, {-1});
  auto b = RunEncoder(tmp_.File("old"), 2, ids, mask, {-1});
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_TRUE(torch::equal(a.hidden[0], b.hidden[0]));
}

TEST_P(TinyLlmTest, OnlyTheTextModelIsRead) {
  const TinySpec s = Spec();
  WriteTiny(tmp_.path(), s);
  uint64_t text_bytes = 0;
  for (const auto& [name, t] : TinyTensors(s)) {
    if (name.rfind(s.prefix, 0) == 0) text_bytes += t.numel() * 4;
  }
  auto run = RunEncoder(tmp_.path(), 2, torch::zeros({1, 3}, torch::kLong), {}, {0});
  ASSERT_TRUE(run.status.ok()) << run.status;
  // Rank 0's share: replicated tensors in full, planned ones halved; at least it excludes the
  // vision tensor and lm_head, which are bigger than the text model's replicated part.
  auto whole = RunEncoder(tmp_.path(), 1, torch::zeros({1, 3}, torch::kLong), {}, {0});
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  EXPECT_EQ(whole.bytes_total, text_bytes);
  EXPECT_LT(run.bytes_total, text_bytes);
}

TEST_P(TinyLlmTest, LeftPaddingDoesNotChangeTheRealTokens) {
  // RoPE scores depend on relative positions only and pads are masked out as keys, so the real
  // tokens of a left-padded row match the same tokens alone (transformers has the same property;
  // the FLUX.2 fixture's padded vs unpadded run differs by ~2e-7).
  WriteTiny(tmp_.path(), Spec());
  auto [ids, mask] = PaddedBatch();
  auto padded = RunEncoder(tmp_.path(), 1, ids, mask, {1, 2, 3});
  auto alone = RunEncoder(tmp_.path(), 1, ids.index({torch::indexing::Slice(0, 1),
                                                      torch::indexing::Slice(2, 7)}),
                          {}, {1, 2, 3});
  auto other = RunEncoder(tmp_.path(), 1, ids.index({torch::indexing::Slice(1, 2)}), {}, {1, 2, 3});
  ASSERT_TRUE(padded.status.ok()) << padded.status;
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  ASSERT_TRUE(other.status.ok()) << other.status;
  for (size_t i = 0; i < 3; ++i) {
    auto real = padded.hidden[i][0].narrow(0, 2, 5);
    EXPECT_LT(RelativeError(real, alone.hidden[i][0]), 1e-5) << "layer " << i + 1;
    EXPECT_LT(RelativeError(padded.hidden[i][1], other.hidden[i][0]), 1e-5) << "layer " << i + 1;
  }
}

TEST_P(TinyLlmTest, FullyMaskedRowsFollowTheAttentionImplementation) {
  WriteTiny(tmp_.path(), Spec());
  auto [ids, mask] = PaddedBatch();
  auto sdpa = RunEncoder(tmp_.path(), 2, ids, mask, {1}, LlmAttentionImplementation::kSdpa);
  auto eager = RunEncoder(tmp_.path(), 2, ids, mask, {1}, LlmAttentionImplementation::kEager);
  ASSERT_TRUE(sdpa.status.ok()) << sdpa.status;
  ASSERT_TRUE(eager.status.ok()) << eager.status;
  EXPECT_FALSE(sdpa.hidden[0].isnan().any().item<bool>());
  EXPECT_FALSE(eager.hidden[0].isnan().any().item<bool>());
  // Real tokens agree; the two leading pads (no key to attend to) do not.
  EXPECT_TRUE(torch::allclose(sdpa.hidden[0][0].narrow(0, 2, 5), eager.hidden[0][0].narrow(0, 2, 5)));
  EXPECT_TRUE(torch::allclose(sdpa.hidden[0][1], eager.hidden[0][1]));
  EXPECT_GT((sdpa.hidden[0][0][0] - eager.hidden[0][0][0]).abs().max().item<float>(), 1e-3);
}

TEST_P(TinyLlmTest, HiddenStateIndices) {
  WriteTiny(tmp_.path(), Spec());
  auto [ids, mask] = PaddedBatch();
  auto all = RunEncoder(tmp_.path(), 1, ids, mask, {0, 1, 2, 3});
  auto picked = RunEncoder(tmp_.path(), 1, ids, mask, {-1, 1, -4, 1});
  auto shallow = RunEncoder(tmp_.path(), 1, ids, mask, {2});
  ASSERT_TRUE(all.status.ok()) << all.status;
  ASSERT_TRUE(picked.status.ok()) << picked.status;
  ASSERT_TRUE(shallow.status.ok()) << shallow.status;
  EXPECT_TRUE(torch::equal(picked.hidden[0], all.hidden[3]));
  EXPECT_TRUE(torch::equal(picked.hidden[1], all.hidden[1]));
  EXPECT_TRUE(torch::equal(picked.hidden[2], all.hidden[0]));
  EXPECT_TRUE(torch::equal(picked.hidden[3], all.hidden[1]));
  EXPECT_TRUE(torch::equal(shallow.hidden[0], all.hidden[2]));
  auto bad = RunEncoder(tmp_.path(), 1, ids, mask, {4});
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status.message()), HasSubstr("hidden state index 4"));
  EXPECT_EQ(RunEncoder(tmp_.path(), 1, ids, mask, {-5}).status.code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(TinyLlmTest, RefusesBadInputs) {
  WriteTiny(tmp_.path(), Spec());
  auto [ids, mask] = PaddedBatch();
  auto two = mask.clone();
  two[0][3] = 2;
  EXPECT_THAT(std::string(RunEncoder(tmp_.path(), 1, ids, two, {0}).status.message()),
              HasSubstr("only 0 and 1"));
  EXPECT_EQ(RunEncoder(tmp_.path(), 1, ids, mask.narrow(1, 0, 5), {0}).status.code(),
            absl::StatusCode::kInvalidArgument);
  auto big = ids.clone();
  big[1][1] = 64;  // vocab_size
  EXPECT_EQ(RunEncoder(tmp_.path(), 1, big, mask, {0}).status.code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Family, TinyLlmTest,
                         ::testing::Values(CausalLmFamily::kMistral3, CausalLmFamily::kQwen25Vl),
                         [](const auto& info) {
                           return info.param == CausalLmFamily::kMistral3 ? "Mistral3" : "Qwen25Vl";
                         });

TEST(TinyMistral, SlidingWindowLimitsTheKeys) {
  TempDir tmp;
  TinySpec full, window;
  window.sliding_window = 2;
  WriteTiny(tmp.File("full"), full);
  WriteTiny(tmp.File("window"), window);
  auto ids = torch::tensor({{5, 9, 13, 2, 40}}, torch::kLong);
  auto a = RunEncoder(tmp.File("full"), 1, ids, {}, {1});
  auto b = RunEncoder(tmp.File("window"), 2, ids, {}, {1});
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  // Positions 0 and 1 see the same keys with a window of 2; later ones lose the earliest keys.
  EXPECT_LT(RelativeError(b.hidden[0][0].narrow(0, 0, 2), a.hidden[0][0].narrow(0, 0, 2)), 1e-6);
  EXPECT_GT(RelativeError(b.hidden[0][0].narrow(0, 2, 3), a.hidden[0][0].narrow(0, 2, 3)), 1e-4);
}

// ---------------------------------------------------------------------------------------------
// Configs.

TEST(CausalLmConfigTest, FixtureConfigs) {
  if (!std::filesystem::exists(Flux2TextEncoderDir()) ||
      !std::filesystem::exists(QwenTextEncoderDir())) {
    GTEST_SKIP();
  }
  auto m = LoadCausalLmConfig(Flux2TextEncoderDir());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->family, CausalLmFamily::kMistral3);
  EXPECT_EQ(m->head_dim, 16);  // explicit, != hidden / heads = 8
  EXPECT_EQ(m->num_hidden_layers, 32);
  EXPECT_EQ(m->sliding_window, 0);
  EXPECT_DOUBLE_EQ(m->rope_theta, 1e9);
  EXPECT_FALSE(m->attention_bias);
  EXPECT_FALSE(m->uses_mrope());
  auto q = LoadCausalLmConfig(QwenTextEncoderDir());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->family, CausalLmFamily::kQwen25Vl);
  EXPECT_EQ(q->head_dim, 8);
  EXPECT_TRUE(q->attention_bias);
  EXPECT_EQ(q->mrope_section, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_DOUBLE_EQ(q->rms_norm_eps, 1e-6);
}

TEST(CausalLmConfigTest, ClassDefaultsForMissingFields) {
  // MistralConfig defaults under text_config; an absent sliding_window is the class's 4096.
  auto m = ParseCausalLmConfig(
      R"({"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {"hidden_size": 64,
          "num_attention_heads": 16}})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->head_dim, 4);
  EXPECT_EQ(m->num_key_value_heads, 8);
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_DOUBLE_EQ(m->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(m->rms_norm_eps, 1e-6);
  EXPECT_EQ(m->vocab_size, 32000);
  // Qwen2.5-VL: text_config wins field by field over the top level; legacy rope_scaling.
  auto q = ParseCausalLmConfig(
      R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"], "hidden_size": 3584,
          "num_attention_heads": 28, "num_key_value_heads": 4, "rope_theta": 5.0,
          "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [16, 24, 24]},
          "text_config": {"hidden_size": 3584, "num_key_value_heads": 4}})");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->num_attention_heads, 28);
  EXPECT_EQ(q->head_dim, 128);
  EXPECT_DOUBLE_EQ(q->rope_theta, 5.0);
  EXPECT_DOUBLE_EQ(q->rms_norm_eps, 1e-5);
}

TEST(CausalLmConfigTest, RefusesUnsupportedSettingsNamingFileAndField) {
  const std::string mistral =
      R"({"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {"hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 2, %s}})";
  auto with = [&](const std::string& extra) {
    std::string s = mistral;
    s.replace(s.find("%s"), 2, extra);
    return ParseCausalLmConfig(s, "te/config.json").status();
  };
  struct Case {
    std::string extra, field;
  } cases[] = {
      {R"("rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e9})",
       "text_config.rope_parameters.factor"},
      {R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e9})",
       "text_config.rope_parameters.rope_type"},
      {R"("rope_scaling": {"type": "linear"})", "text_config.rope_scaling.type"},
      {R"("hidden_act": "gelu")", "text_config.hidden_act"},
      {R"("model_type": "ministral3")", "text_config.model_type"},
      {R"("sliding_window": -1)", "text_config.sliding_window"},
      {R"("layer_types": ["sliding_attention"])", "text_config.layer_types"},
      {R"("head_dim": 7)", "text_config.head_dim"},
  };
  for (const auto& c : cases) {
    auto s = with(c.extra);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.extra;
    EXPECT_THAT(std::string(s.message()), HasSubstr("te/config.json: field '" + c.field + "'"))
        << c.extra;
  }
  EXPECT_THAT(std::string(ParseCausalLmConfig(R"({"architectures": ["LlamaForCausalLM"]})", "x.json")
                              .status()
                              .message()),
              HasSubstr("x.json: field 'architectures'"));
  EXPECT_THAT(std::string(ParseCausalLmConfig(
                              R"({"architectures": ["Mistral3ForConditionalGeneration"]})", "x.json")
                              .status()
                              .message()),
              HasSubstr("'text_config'"));
  const std::string qwen_sw =
      R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"], "use_sliding_window": true,
          "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})";
  EXPECT_THAT(std::string(ParseCausalLmConfig(qwen_sw, "q.json").status().message()),
              HasSubstr("q.json: field 'use_sliding_window'"));
  const std::string qwen_sections =
      R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"], "hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 2,
          "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 2]}})";
  EXPECT_THAT(std::string(ParseCausalLmConfig(qwen_sections, "q.json").status().message()),
              HasSubstr("mrope_section"));
  EXPECT_THAT(std::string(ParseCausalLmConfig(
                              R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"]})", "q.json")
                              .status()
                              .message()),
              HasSubstr("rope_scaling"));
}

// ---------------------------------------------------------------------------------------------
// Inputs, RoPE, prompt embeddings.

TEST(CausalLmInputsTest, PositionIdsPerFamily) {
  CausalLmConfig mistral;
  CausalLmConfig qwen;
  qwen.family = CausalLmFamily::kQwen25Vl;
  qwen.mrope_section = {2, 1, 1};
  auto mask = torch::tensor({{0, 0, 1, 1, 1}, {1, 1, 1, 1, 1}}, torch::kLong);
  // MistralModel: cache_position for every row, padding or not.
  auto m = CausalLmPositionIds(mistral, mask, 2, 5, torch::kCPU);
  EXPECT_TRUE(torch::equal(m, torch::arange(5).expand({2, 5})));
  // get_rope_index, text only: cumsum(mask) - 1, pads set to 1, on all three axes.
  auto q = CausalLmPositionIds(qwen, mask, 2, 5, torch::kCPU);
  ASSERT_EQ(q.sizes(), (std::vector<int64_t>{3, 2, 5}));
  auto want = torch::tensor({{1, 1, 0, 1, 2}, {0, 1, 2, 3, 4}}, torch::kLong);
  for (int a = 0; a < 3; ++a) EXPECT_TRUE(torch::equal(q[a], want));
  EXPECT_TRUE(torch::equal(CausalLmPositionIds(qwen, {}, 2, 5, torch::kCPU)[1],
                           torch::arange(5).expand({2, 5})));
}

TEST(CausalLmInputsTest, AttendMask) {
  auto mask = torch::tensor({{0, 1, 1}}, torch::kLong);
  auto m = CausalLmAttendMask(mask, 1, 3, 0, torch::kCPU);
  auto want = torch::tensor({{false, false, false}, {false, true, false}, {false, true, true}});
  EXPECT_TRUE(torch::equal(m[0][0], want));
  auto w = CausalLmAttendMask({}, 1, 4, 2, torch::kCPU);
  auto want_w = torch::tensor({{true, false, false, false},
                               {true, true, false, false},
                               {false, true, true, false},
                               {false, false, true, true}});
  EXPECT_TRUE(torch::equal(w[0][0], want_w));
}

TEST(LlmRopeTest, MropeWithEqualAxesIsPlainRope) {
  auto pos = torch::tensor({{3, 1, 0, 1, 2}}, torch::kLong);
  auto plain = LlmRopeTables(pos, 8, 1e6, {}, torch::kFloat);
  auto mrope = LlmRopeTables(pos.unsqueeze(0).expand({3, 1, 5}), 8, 1e6, {2, 1, 1}, torch::kFloat);
  EXPECT_TRUE(torch::equal(plain.cos, mrope.cos));
  EXPECT_TRUE(torch::equal(plain.sin, mrope.sin));
  // Distinct axes: frequency chunk [2, 1, 1, 2, 1, 1] takes axis 0, 1, 2, 0, 1, 2.
  auto axes = torch::stack({torch::full({1, 5}, 1, torch::kLong), torch::full({1, 5}, 2, torch::kLong),
                            torch::full({1, 5}, 3, torch::kLong)});
  auto mixed = LlmRopeTables(axes, 8, 1e6, {2, 1, 1}, torch::kFloat);
  for (int64_t a = 0; a < 3; ++a) {
    auto one = LlmRopeTables(axes[a], 8, 1e6, {}, torch::kFloat);
    for (int64_t col : {0, 1, 2, 3, 4, 5, 6, 7}) {
      const int64_t chunk = col < 2 ? 0 : col < 3 ? 1 : col < 4 ? 2 : col < 6 ? 3 : col < 7 ? 4 : 5;
      if (chunk % 3 != a) continue;
      EXPECT_TRUE(torch::equal(mixed.cos.select(-1, col), one.cos.select(-1, col))) << col;
    }
  }
}

TEST(LlmPromptEmbedsTest, StackAndQwenDrop) {
  auto a = torch::randn({2, 3, 4}), b = torch::randn({2, 3, 4});
  auto s = StackHiddenStatesPerToken({a, b});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->sizes(), (std::vector<int64_t>{2, 3, 8}));
  EXPECT_TRUE(torch::equal(s->narrow(2, 0, 4), a));
  EXPECT_TRUE(torch::equal(s->narrow(2, 4, 4), b));
  EXPECT_FALSE(StackHiddenStatesPerToken({a, torch::randn({2, 3, 5})}).ok());

  auto h = torch::randn({2, 6, 4});
  auto mask = torch::tensor({{0, 0, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}}, torch::kLong);
  auto q = QwenImagePromptEmbeds(h, mask, 2);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->first.sizes(), (std::vector<int64_t>{2, 4, 4}));
  EXPECT_TRUE(torch::equal(q->first[0].narrow(0, 0, 2), h[0].narrow(0, 4, 2)));
  EXPECT_TRUE(torch::equal(q->first[0].narrow(0, 2, 2), torch::zeros({2, 4})));
  EXPECT_TRUE(torch::equal(q->first[1], h[1].narrow(0, 2, 4)));
  EXPECT_TRUE(torch::equal(q->second, torch::tensor({{1, 1, 0, 0}, {1, 1, 1, 1}}, torch::kLong)));
  auto cut = QwenImagePromptEmbeds(h, mask, 2, 3);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->first.size(1), 3);
}

}  // namespace
}  // namespace ditserve::text
