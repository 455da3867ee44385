// TP plans (diffusers hooks/tensor_parallel.py and the models' _tp_plan), validation (diffusers modeling_utils.py's enable_parallelism and hooks/tensor_parallel.py) and slice arithmetic; torch-free.
#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sharding/checkpoint.h"
#include "sharding/plan_report.h"
#include "sharding/plan_resolver.h"
#include "sharding/slicing.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"

namespace ditserve::sharding {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> Flatten(const TpPlan& plan) {
  std::map<std::string, std::string> out;
  for (const auto& r : plan.rules) {
    std::string v(TpStyleName(r.style));
    if (!r.blocks.empty()) {
      v += "[";
      for (size_t i = 0; i < r.blocks.size(); ++i) v += (i ? "," : "") + std::to_string(r.blocks[i]);
      v += "]";
    }
    out[r.key] = v;
  }
  return out;
}

std::map<std::string, std::string> DualAttention() {
  std::map<std::string, std::string> m;
  for (const char* k : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"}) {
    m[std::string("transformer_blocks.*.attn.") + k] = "colwise";
  }
  m["transformer_blocks.*.attn.to_out.0"] = "rowwise";
  m["transformer_blocks.*.attn.to_add_out"] = "rowwise";
  return m;
}

TEST(TpPlanTest, Flux1PlanEqualsDiffusers) {
  // FLUX.1-dev config defaults: D = 24 * 128 = 3072, MLP 4D = 12288.
  auto plan = BuiltinTpPlan("FluxTransformer2DModel", nlohmann::json::object());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto want = DualAttention();
  want["transformer_blocks.*.ff.net.0.proj"] = "colwise";
  want["transformer_blocks.*.ff.net.2"] = "rowwise";
  want["transformer_blocks.*.ff_context.net.0.proj"] = "colwise";
  want["transformer_blocks.*.ff_context.net.2"] = "rowwise";
  for (const char* k : {"to_q", "to_k", "to_v"}) {
    want[std::string("single_transformer_blocks.*.attn.") + k] = "colwise";
  }
  want["single_transformer_blocks.*.proj_mlp"] = "colwise";
  want["single_transformer_blocks.*.proj_out"] = "packed_rowwise[3072,12288]";
  EXPECT_EQ(Flatten(*plan), want);
  EXPECT_EQ(plan->rules.size(), want.size());
}

TEST(TpPlanTest, Flux2PlanEqualsDiffusers) {
  // FLUX.2-dev: D = 48 * 128 = 6144, Mh = 3 * D = 18432.
  nlohmann::json config = {{"num_attention_heads", 48}, {"attention_head_dim", 128},
                           {"mlp_ratio", 3.0}};
  for (const char* cls : {"Flux2Transformer2DModel", "Flux2TransformerModel"}) {
    auto plan = BuiltinTpPlan(cls, config);
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto want = DualAttention();
    want["transformer_blocks.*.ff.linear_in"] = "packed_colwise[1,1]";
    want["transformer_blocks.*.ff.linear_out"] = "rowwise";
    want["transformer_blocks.*.ff_context.linear_in"] = "packed_colwise[1,1]";
    want["transformer_blocks.*.ff_context.linear_out"] = "rowwise";
    want["single_transformer_blocks.*.attn.to_qkv_mlp_proj"] =
        "packed_colwise[6144,6144,6144,18432,18432]";
    want["single_transformer_blocks.*.attn.to_out"] = "packed_rowwise[6144,18432]";
    EXPECT_EQ(Flatten(*plan), want);
  }
  // Mh = int(D * mlp_ratio) truncates.
  auto odd = BuiltinTpPlan("Flux2Transformer2DModel",
                           {{"num_attention_heads", 4}, {"attention_head_dim", 16},
                            {"mlp_ratio", 2.99}});
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->Find("single_transformer_blocks.*.attn.to_out")->blocks,
            (std::vector<int64_t>{64, 191}));
}

TEST(TpPlanTest, QwenImagePlanEqualsDiffusers) {
  auto plan = BuiltinTpPlan("QwenImageTransformer2DModel", nlohmann::json::object());
  ASSERT_TRUE(plan.ok());
  auto want = DualAttention();
  want["transformer_blocks.*.img_mlp.net.0.proj"] = "colwise";
  want["transformer_blocks.*.img_mlp.net.2"] = "rowwise";
  want["transformer_blocks.*.txt_mlp.net.0.proj"] = "colwise";
  want["transformer_blocks.*.txt_mlp.net.2"] = "rowwise";
  EXPECT_EQ(Flatten(*plan), want);
}

// Our extension: the AdaLN modulation projections become rowwise_split_input; nothing else changes,
// and a second call adds nothing.
TEST(TpPlanTest, ModulationShardingAddsOnlyTheModulationRules) {
  const std::map<std::string, std::vector<std::string>> modulation = {
      {"FluxTransformer2DModel",
       {"transformer_blocks.*.norm1.linear", "transformer_blocks.*.norm1_context.linear",
        "single_transformer_blocks.*.norm.linear", "norm_out.linear"}},
      {"Flux2Transformer2DModel",
       {"double_stream_modulation_img.linear", "double_stream_modulation_txt.linear",
        "single_stream_modulation.linear", "norm_out.linear"}},
      {"QwenImageTransformer2DModel",
       {"transformer_blocks.*.img_mod.1", "transformer_blocks.*.txt_mod.1", "norm_out.linear"}}};
  for (const auto& [cls, keys] : modulation) {
    auto plan = BuiltinTpPlan(cls, nlohmann::json::object());
    ASSERT_TRUE(plan.ok()) << cls << ": " << plan.status();
    auto want = Flatten(*plan);
    for (const auto& k : keys) {
      ASSERT_EQ(want.count(k), 0u) << cls << " " << k;
      want[k] = "rowwise_split_input";
    }
    AddModulationSharding(&*plan);
    EXPECT_EQ(Flatten(*plan), want) << cls;
    AddModulationSharding(&*plan);
    EXPECT_EQ(plan->rules.size(), want.size()) << cls;
  }
  // A text encoder's plan is left as it is.
  auto text = BuiltinTpPlan("Mistral3ForConditionalGeneration", nlohmann::json::object());
  ASSERT_TRUE(text.ok()) << text.status();
  const auto before = Flatten(*text);
  AddModulationSharding(&*text);
  EXPECT_EQ(Flatten(*text), before);
}

TEST(TpPlanTest, UnknownClassAndBadConfig) {
  auto r = BuiltinTpPlan("AutoencoderKL", nlohmann::json::object());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'AutoencoderKL' does not define one"));
  EXPECT_FALSE(BuiltinTpPlan("FluxTransformer2DModel", {{"num_attention_heads", "24"}}).ok());
  EXPECT_FALSE(BuiltinTpPlan("Flux2Transformer2DModel", {{"mlp_ratio", -1}}).ok());
}

TEST(TpPlanTest, ParsesJsonPlans) {
  nlohmann::json j = {
      {"blocks.*.a", "colwise"},
      {"blocks.*.b", "rowwise_split_input"},
      {"blocks.*.c", {{"style", "packed_colwise"}, {"blocks", {1, 2}}}},
      {"single_transformer_blocks.*.proj_out", {{"style", "packed_rowwise"}}},
  };
  auto plan = ParseTpPlanJson(j, "FluxTransformer2DModel",
                              {{"num_attention_heads", 4}, {"attention_head_dim", 16}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->Find("blocks.*.b")->style, TpStyle::kRowwiseSplitInput);
  EXPECT_EQ(plan->Find("blocks.*.c")->blocks, (std::vector<int64_t>{1, 2}));
  // Omitted blocks come from the model config, like the module's _tp_packed_row_blocks.
  EXPECT_EQ(plan->Find("single_transformer_blocks.*.proj_out")->blocks,
            (std::vector<int64_t>{64, 256}));
  auto back = ParseTpPlanJson(TpPlanToJson(*plan), "", {});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(Flatten(*back), Flatten(*plan));

  auto bad = ParseTpPlanJson({{"x", "sequence"}}, "", {});
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("Unsupported tensor-parallel style 'sequence'"));
  EXPECT_FALSE(ParseTpPlanJson({{"x", {{"style", "colwise"}, {"blocks", {1}}}}}, "", {}).ok());
  EXPECT_FALSE(ParseTpPlanJson({{"x", {{"style", "packed_colwise"}, {"blocks", {0}}}}}, "", {}).ok());
  EXPECT_FALSE(ParseTpPlanJson({{"x", 3}}, "", {}).ok());
  EXPECT_FALSE(ParseTpPlanJson(nlohmann::json::array(), "", {}).ok());
}

// transformers' base_model_tp_plan of MistralConfig / Qwen2_5_VLTextConfig, under `prefix`.
std::map<std::string, std::string> TextModelPlan(const std::string& prefix) {
  std::map<std::string, std::string> m;
  for (const char* k : {"q_proj", "k_proj", "v_proj"}) m[prefix + "layers.*.self_attn." + k] = "colwise";
  m[prefix + "layers.*.self_attn.o_proj"] = "rowwise";
  m[prefix + "layers.*.mlp.gate_proj"] = "colwise";
  m[prefix + "layers.*.mlp.up_proj"] = "colwise";
  m[prefix + "layers.*.mlp.down_proj"] = "rowwise";
  return m;
}

TEST(TpPlanTest, TextEncoderPlansEqualTransformers) {
  for (const char* cls : {"Mistral3ForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"}) {
    auto plan = BuiltinTpPlan(cls, nlohmann::json::object());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(Flatten(*plan), TextModelPlan("model.language_model.")) << cls;
    const auto prefixes = TextModelPrefixes(cls);
    ASSERT_EQ(prefixes.size(), 2u);
    for (const auto& p : prefixes) {
      auto under = BuiltinTpPlan(cls, nlohmann::json::object(), p);
      ASSERT_TRUE(under.ok()) << under.status();
      EXPECT_EQ(Flatten(*under), TextModelPlan(p));
    }
    auto bad = BuiltinTpPlan(cls, nlohmann::json::object(), "vision_tower.");
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(TextModelPrefixes("Mistral3ForConditionalGeneration")[1], "language_model.model.");
  EXPECT_EQ(TextModelPrefixes("Qwen2_5_VLForConditionalGeneration")[1], "model.");
  EXPECT_TRUE(TextModelPrefixes("FluxTransformer2DModel").empty());
  // Diffusers classes ignore the prefix.
  auto flux = BuiltinTpPlan("QwenImageTransformer2DModel", nlohmann::json::object(), "x.");
  ASSERT_TRUE(flux.ok());
}

TEST(TpPlanTest, DetectsTheTextModelLayoutAndClass) {
  std::set<std::string> names = {"model.embed_tokens.weight", "visual.patch_embed.proj.weight"};
  auto has = [&](const std::string& n) { return names.count(n) != 0; };
  auto p = DetectTextModelPrefix("Qwen2_5_VLForConditionalGeneration", has);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, "model.");
  names.insert("model.language_model.embed_tokens.weight");
  EXPECT_EQ(*DetectTextModelPrefix("Qwen2_5_VLForConditionalGeneration", has),
            "model.language_model.");
  names = {"model.embed_tokens.weight", "vision_tower.patch_conv.weight"};  // a Qwen-style name only
  auto none = DetectTextModelPrefix("Mistral3ForConditionalGeneration", has);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("language_model.model.embed_tokens.weight"));

  EXPECT_EQ(ConfigClassName({{"_class_name", "FluxTransformer2DModel"}}), "FluxTransformer2DModel");
  EXPECT_EQ(ConfigClassName({{"architectures", {"Mistral3ForConditionalGeneration"}}}),
            "Mistral3ForConditionalGeneration");
  EXPECT_EQ(ConfigClassName(nlohmann::json::object()), "");
}

TEST(PlanResolverTest, TextEncoderDegreeMustKeepWholeKeyValueGroups) {
  // A Mistral-like text model: 4 query heads of 8, 2 key/value heads.
  std::vector<TensorMeta> t;
  const std::string p = "model.language_model.layers.0.";
  t.push_back({"model.language_model.embed_tokens.weight", DType::kF32, {16, 32}});
  t.push_back({p + "self_attn.q_proj.weight", DType::kF32, {32, 32}});
  t.push_back({p + "self_attn.k_proj.weight", DType::kF32, {16, 32}});
  t.push_back({p + "self_attn.v_proj.weight", DType::kF32, {16, 32}});
  t.push_back({p + "self_attn.o_proj.weight", DType::kF32, {32, 32}});
  t.push_back({p + "mlp.gate_proj.weight", DType::kF32, {64, 32}});
  t.push_back({p + "mlp.up_proj.weight", DType::kF32, {64, 32}});
  t.push_back({p + "mlp.down_proj.weight", DType::kF32, {32, 64}});
  t.push_back({"model.vision_tower.w", DType::kF32, {3, 5}});
  auto plan = BuiltinTpPlan("Mistral3ForConditionalGeneration", nlohmann::json::object());
  ASSERT_TRUE(plan.ok());
  const nlohmann::json nested = {
      {"text_config", {{"num_attention_heads", 4}, {"num_key_value_heads", 2}}},
      {"vision_config", {{"num_attention_heads", 3}}}};
  const nlohmann::json flat = {{"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  for (const auto* config : {&nested, &flat}) {
    auto ok = ResolveTpPlan(&*plan, t, 2, config);
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->modules.size(), 7u);
    // k_proj's 16 rows would split 4 ways, but a rank would hold half a key/value head.
    auto bad = ResolveTpPlan(&*plan, t, 4, config);
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(std::string(bad.status().message()),
                HasSubstr("`tp_degree` (4) must divide both the number of attention heads (4) and "
                          "the number of key/value heads (2)"));
  }
  // Without a key/value count only the heads (and row counts) are checked: tp 4 would pass.
  const nlohmann::json heads_only = {{"num_attention_heads", 4}};
  EXPECT_TRUE(ResolveTpPlan(&*plan, t, 4, &heads_only).ok());
}

TEST(PlanResolverTest, TextEncoderFixturePlans) {
  struct Case {
    const char* dir;
    const char* prefix;
  } cases[] = {{"flux2-tiny/text_encoder", "language_model.model."},
               {"qwenimage-tiny/text_encoder", "model."}};
  for (const auto& c : cases) {
    const std::string dir = testing::FixturesDir() + "/" + c.dir;
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
    auto ckpt = ComponentCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto plan = BuiltinTpPlanForCheckpoint(**ckpt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(Flatten(*plan), TextModelPlan(c.prefix)) << c.dir;
    auto two = ResolveTpPlan(&*plan, **ckpt, 2);
    ASSERT_TRUE(two.ok()) << two.status();
    // Both tiny text models have 4 query heads and 2 key/value heads.
    auto four = ResolveTpPlan(&*plan, **ckpt, 4);
    ASSERT_FALSE(four.ok());
    EXPECT_THAT(std::string(four.status().message()), HasSubstr(c.dir));
    EXPECT_THAT(std::string(four.status().message()), HasSubstr("key/value heads (2)"));
  }
}

// A toy model: two blocks with a colwise/rowwise pair and a packed layer.
std::vector<TensorMeta> ToyTensors() {
  std::vector<TensorMeta> t;
  for (int b = 0; b < 2; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    t.push_back({p + "up.weight", DType::kF32, {8, 4}});
    t.push_back({p + "up.bias", DType::kF32, {8}});
    t.push_back({p + "down.weight", DType::kF32, {4, 8}});
    t.push_back({p + "down.bias", DType::kF32, {4}});
    t.push_back({p + "qkv.weight", DType::kF32, {12, 4}});
    t.push_back({p + "out.weight", DType::kF32, {4, 12}});
    t.push_back({p + "norm.weight", DType::kF32, {4}});
  }
  t.push_back({"embed.weight", DType::kF32, {4, 4}});
  return t;
}

TpPlan ToyPlan() {
  TpPlan p;
  p.rules = {{"blocks.*.up", TpStyle::kColwise, {}},
             {"blocks.*.down", TpStyle::kRowwise, {}},
             {"blocks.*.qkv", TpStyle::kPackedColwise, {1, 1, 1}},
             {"blocks.*.out", TpStyle::kPackedRowwise, {4, 8}}};
  return p;
}

TEST(PlanResolverTest, ResolvesToyPlan) {
  const auto tensors = ToyTensors();
  const TpPlan plan = ToyPlan();
  auto r = ResolveTpPlan(&plan, tensors, 2, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->modules.size(), 8u);
  std::map<std::string, PlannedTensor> by;
  for (const auto& t : r->tensors) by[t.name] = t;
  EXPECT_EQ(by["blocks.1.up.weight"].split_dim, 0);
  EXPECT_EQ(by["blocks.1.up.bias"].split_dim, 0);
  EXPECT_EQ(by["blocks.1.down.weight"].split_dim, 1);
  EXPECT_EQ(by["blocks.1.down.bias"].split_dim, -1);  // rowwise bias replicated
  EXPECT_EQ(by["blocks.1.down.bias"].style, TpStyle::kRowwise);
  EXPECT_EQ(by["blocks.0.qkv.weight"].blocks, (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(by["blocks.0.out.weight"].blocks, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(by["blocks.0.norm.weight"].split_dim, -1);
  EXPECT_EQ(by["embed.weight"].style, TpStyle::kReplicated);

  // Rank 1 of 2: colwise rows [4, 8); packed blocks [2,4) [6,8) [10,12); packed rowwise
  // columns [2,4) and [8,12).
  RankSlice s = SliceForRank(by["blocks.0.qkv.weight"], 1, 2);
  EXPECT_EQ(s.local_shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(s.ranges, (std::vector<std::pair<int64_t, int64_t>>{{2, 4}, {6, 8}, {10, 12}}));
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  ForEachByteRun({12, 4}, s, 4, [&](uint64_t o, uint64_t l) { runs.emplace_back(o, l); });
  EXPECT_EQ(runs, (std::vector<std::pair<uint64_t, uint64_t>>{{32, 32}, {96, 32}, {160, 32}}));

  s = SliceForRank(by["blocks.0.out.weight"], 1, 2);
  EXPECT_EQ(s.local_shape, (std::vector<int64_t>{4, 6}));
  runs.clear();
  ForEachByteRun({4, 12}, s, 2, [&](uint64_t o, uint64_t l) { runs.emplace_back(o, l); });
  ASSERT_EQ(runs.size(), 8u);  // two column ranges per row
  EXPECT_EQ(runs[0], (std::pair<uint64_t, uint64_t>{4, 4}));
  EXPECT_EQ(runs[1], (std::pair<uint64_t, uint64_t>{16, 8}));
  EXPECT_EQ(runs[2], (std::pair<uint64_t, uint64_t>{28, 4}));

  // n = 1 and replicated tensors are one run each.
  auto one = ResolveTpPlan(&plan, tensors, 1, nullptr);
  ASSERT_TRUE(one.ok());
  for (const auto& t : one->tensors) {
    runs.clear();
    ForEachByteRun(t.shape, SliceForRank(t, 0, 1), 4,
                   [&](uint64_t o, uint64_t l) { runs.emplace_back(o, l); });
    ASSERT_EQ(runs.size(), 1u) << t.name;
    EXPECT_EQ(runs[0].first, 0u);
  }
}

struct ErrorCase {
  const char* what;
  std::function<void(std::vector<TensorMeta>*, TpPlan*)> edit;
  int n;
  std::vector<std::string> message;
};

TEST(PlanResolverTest, EveryValidationError) {
  nlohmann::json config = {{"num_attention_heads", 4}};
  const std::vector<ErrorCase> cases = {
      {"tp 0", [](auto*, auto*) {}, 0, {"`tp_degree` must be >= 1"}},
      {"heads", [](auto*, auto*) {}, 3,
       {"`tp_degree` (3) must divide the number of attention heads (4)."}},
      {"two wildcards",
       [](auto*, TpPlan* p) { p->rules.push_back({"blocks.*.x.*.y", TpStyle::kColwise, {}}); }, 2,
       {"Wildcard '*' can only be used once in a `_tp_plan` key, got 'blocks.*.x.*.y'."}},
      {"partial wildcard",
       [](auto*, TpPlan* p) { p->rules.push_back({"blocks*.up", TpStyle::kColwise, {}}); }, 2,
       {"'blocks*.up'", "whole path component"}},
      {"missing block list",
       [](auto*, TpPlan* p) { p->rules.push_back({"layers.*.up", TpStyle::kColwise, {}}); }, 2,
       {"`_tp_plan` wildcard 'layers.*.up' must expand over a block list", "'layers.<index>.*'"}},
      {"missing weight",
       [](std::vector<TensorMeta>* t, auto*) { t->erase(t->begin()); }, 2,
       {"'blocks.0.up'", "no tensor 'blocks.0.up.weight'"}},
      {"missing module",
       [](auto*, TpPlan* p) { p->rules.push_back({"embed.proj", TpStyle::kColwise, {}}); }, 2,
       {"no tensor 'embed.proj.weight'"}},
      {"weight rank",
       [](std::vector<TensorMeta>* t, auto*) { (*t)[0].shape = {8, 2, 2}; }, 2,
       {"'blocks.0.up.weight' has shape [8, 2, 2]", "rank 2"}},
      {"bias shape",
       [](std::vector<TensorMeta>* t, auto*) { (*t)[1].shape = {4}; }, 2,
       {"'blocks.0.up.bias' has shape [4]", "[8]"}},
      {"colwise rows",
       [](std::vector<TensorMeta>* t, auto*) {
         (*t)[0].shape = {6, 4};
         (*t)[1].shape = {6};
       },
       4, {"Cannot colwise-shard 'blocks.0.up' weight rows (6) across 4 tensor-parallel ranks: "
           "not divisible by 4."}},
      {"rowwise columns",
       [](std::vector<TensorMeta>* t, auto*) { (*t)[2].shape = {4, 6}; }, 4,
       {"Cannot rowwise-shard 'blocks.0.down' weight columns (6) across 4 tensor-parallel ranks: "
        "not divisible by 4."}},
      {"packed proportions",
       [](auto*, TpPlan* p) { p->rules[2].blocks = {1, 1, 3}; }, 2,
       {"'blocks.0.qkv'", "Cannot split 12 into proportional blocks [1, 1, 3]: sum([1, 1, 3])=5 "
                          "does not divide 12."}},
      {"packed block individually",
       [](auto*, TpPlan* p) { p->rules[3].blocks = {1, 5}; }, 4,
       {"Cannot shard packed block of size 2 across 4 tensor-parallel ranks: 2 is not divisible "
        "by 4.", "'blocks.0.out'", "[4, 12]"}},
      {"packed without blocks",
       [](auto*, TpPlan* p) { p->rules[2].blocks.clear(); }, 2, {"needs blocks"}},
      {"planned twice",
       [](auto*, TpPlan* p) { p->rules.push_back({"blocks.1.up", TpStyle::kColwise, {}}); }, 2,
       {"plans module 'blocks.1.up' twice", "'blocks.*.up'", "'blocks.1.up'"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto tensors = ToyTensors();
    TpPlan plan = ToyPlan();
    c.edit(&tensors, &plan);
    auto r = ResolveTpPlan(&plan, tensors, c.n, &config);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    for (const auto& m : c.message) EXPECT_THAT(std::string(r.status().message()), HasSubstr(m));
  }
}

// The planned Linear shapes of a full-size model, enough to check the valid degrees of diffusers hooks/tensor_parallel.py.
std::vector<TensorMeta> FullSizeFlux1() {
  const int64_t d = 3072, mlp = 12288;
  std::vector<TensorMeta> t;
  auto lin = [&](const std::string& m, int64_t out, int64_t in) {
    t.push_back({m + ".weight", DType::kBF16, {out, in}});
    t.push_back({m + ".bias", DType::kBF16, {out}});
  };
  for (int b = 0; b < 19; ++b) {
    const std::string p = "transformer_blocks." + std::to_string(b) + ".";
    for (const char* m : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj",
                          "attn.add_k_proj", "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out"}) {
      lin(p + m, d, d);
    }
    lin(p + "ff.net.0.proj", mlp, d);
    lin(p + "ff.net.2", d, mlp);
    lin(p + "ff_context.net.0.proj", mlp, d);
    lin(p + "ff_context.net.2", d, mlp);
  }
  for (int b = 0; b < 38; ++b) {
    const std::string p = "single_transformer_blocks." + std::to_string(b) + ".";
    for (const char* m : {"attn.to_q", "attn.to_k", "attn.to_v"}) lin(p + m, d, d);
    lin(p + "proj_mlp", mlp, d);
    lin(p + "proj_out", d, d + mlp);
  }
  return t;
}

TEST(PlanResolverTest, ValidDegreesOfFullSizeFlux1) {
  const nlohmann::json config = {{"num_attention_heads", 24}, {"attention_head_dim", 128}};
  auto plan = BuiltinTpPlan("FluxTransformer2DModel", config);
  ASSERT_TRUE(plan.ok());
  const auto tensors = FullSizeFlux1();
  std::vector<int> valid;
  for (int n = 1; n <= 48; ++n) {
    if (ResolveTpPlan(&*plan, tensors, n, &config).ok()) valid.push_back(n);
  }
  EXPECT_EQ(valid, (std::vector<int>{1, 2, 3, 4, 6, 8, 12, 24}));
  auto r = ResolveTpPlan(&*plan, tensors, 4, &config);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->modules.size(), 19u * 12 + 38u * 5);
}

TEST(PlanReportTest, DescribesFixture) {
  auto ckpt = ComponentCheckpoint::Open(ditserve::testing::FixturesDir() + "/flux2-tiny/transformer");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto plan = BuiltinTpPlan((*ckpt)->class_name(), (*ckpt)->config());
  ASSERT_TRUE(plan.ok());
  auto report = DescribeShardPlan(**ckpt, &*plan, 4, std::nullopt);
  ASSERT_TRUE(report.ok()) << report.status();
  const auto& j = *report;
  EXPECT_EQ(j["valid"], true);
  EXPECT_EQ(j["tp_degree"], 4);
  EXPECT_EQ(j["planned_modules"], 28);
  uint64_t sum = 0;
  bool saw_packed = false;
  for (const auto& t : j["tensors"]) {
    uint64_t b = t["bytes_per_rank"][0].get<uint64_t>();
    sum += b;
    if (t["name"] == "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight") {
      saw_packed = true;
      EXPECT_EQ(t["style"], "packed_colwise");
      EXPECT_EQ(t["global_shape"], nlohmann::ordered_json({576, 64}));
      EXPECT_EQ(t["rank_shapes"][3], nlohmann::ordered_json({144, 64}));
      EXPECT_EQ(t["blocks"], nlohmann::ordered_json({64, 64, 64, 192, 192}));
      EXPECT_EQ(b, 144u * 64 * 4);
    }
  }
  EXPECT_TRUE(saw_packed);
  EXPECT_EQ(j["total_bytes_per_rank"][0].get<uint64_t>(), sum);
  EXPECT_EQ(j["sharded_bytes"].get<uint64_t>() + j["replicated_bytes"].get<uint64_t>(),
            j["total_bytes"].get<uint64_t>());
  EXPECT_EQ(j["total_bytes"].get<uint64_t>(), (*ckpt)->total_bytes());
  // bf16 halves every float tensor.
  auto bf16 = DescribeShardPlan(**ckpt, &*plan, 4, DType::kBF16);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ((*bf16)["total_bytes"].get<uint64_t>() * 2, (*ckpt)->total_bytes());
  // Invalid degree: the validation error, naming the folder.
  auto bad = DescribeShardPlan(**ckpt, &*plan, 3, std::nullopt);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("flux2-tiny/transformer"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("must divide the number of attention heads (4)"));
}

}  // namespace
}  // namespace ditserve::sharding
