// models/text: Qwen2.5-VL's vision tower (Qwen-Image-Edit's image features).
//
//   * the config: the tiny fixture's vision_config, defaults, refusals naming the field;
//   * the window layout: a permutation whose inverse round-trips, windows checked against a
//     brute-force ordering, segments that tile the sequence;
//   * the tower on the qwenimage-tiny text_encoder (loaded through the production loader) and on
//     random-weight towers built here (window attention): output shapes, several images equal each
//     image alone, attention kept within a window, bf16, the "model.visual." layout, input
//     refusals; and agreement with a naive transformation of transformers' code written out below
//     (Conv3d, a table-indexed rotary embedding, window indices by padding with -100, eager
//     attention under a block-diagonal additive mask, argsort). Parity with transformers' own
//     numbers comes from the GPU host's fixtures later.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/torch_compat.h"
#include "models/text/qwen2_5_vl_vision.h"
#include "models/text/qwen2_5_vl_vision_attention.h"
#include "models/text/qwen2_5_vl_vision_config.h"
#include "models/text/qwen2_5_vl_vision_layout.h"
#include "tests/support/fixtures.h"
#include "tests/unit/sharding_test_util.h"

namespace ditserve::text {
namespace {

using testing::FixturesDir;
using ::testing::HasSubstr;
using testing::TempDir;
using Grid = std::array<int64_t, 3>;
using Weights = std::map<std::string, torch::Tensor>;

std::string TinyDir() {
  return FixturesDir() + "/qwenimage-tiny/text_encoder";
}

torch::Tensor GridTensor(const std::vector<Grid>& grids) {
  std::vector<int64_t> flat;
  for (const Grid& g : grids) flat.insert(flat.end(), g.begin(), g.end());
  return torch::tensor(flat, torch::kLong).view({-1, 3});
}

int64_t Patches(const std::vector<Grid>& grids) {
  int64_t n = 0;
  for (const Grid& g : grids) n += g[0] * g[1] * g[2];
  return n;
}

torch::Tensor Randn(std::vector<int64_t> shape, uint64_t seed) {
  return torch::randn(shape, compat::SeededCpuGenerator(seed), torch::kFloat32);
}

// A small tower with patch_size 2 (patch_dim 24) and windows of 2 x 2 merged tokens.
Qwen25VlVisionConfig SmallConfig(int64_t depth, std::vector<int64_t> fullatt) {
  Qwen25VlVisionConfig c;
  c.depth = depth;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.intermediate_size = 48;
  c.out_hidden_size = 24;
  c.patch_size = 2;
  c.window_size = 8;
  c.fullatt_block_indexes = std::move(fullatt);
  return c;
}

Weights RandomTower(const Qwen25VlVisionConfig& c, const std::string& prefix, uint64_t seed) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, m = d * c.spatial_merge_unit();
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
    auto t = Randn(shape, seed++) * (norm ? 0.1 : 0.3);
    w[prefix + name] = norm ? t + 1.0 : t;
  };
  add("patch_embed.proj.weight",
      {d, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size});
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string p = absl::StrCat("blocks.", i, ".");
    add(p + "norm1.weight", {d}, true);
    add(p + "norm2.weight", {d}, true);
    add(p + "attn.qkv.weight", {3 * d, d});
    add(p + "attn.qkv.bias", {3 * d});
    add(p + "attn.proj.weight", {d, d});
    add(p + "attn.proj.bias", {d});
    for (const char* proj : {"gate_proj", "up_proj"}) {
      add(absl::StrCat(p, "mlp.", proj, ".weight"), {f, d});
      add(absl::StrCat(p, "mlp.", proj, ".bias"), {f});
    }
    add(p + "mlp.down_proj.weight", {d, f});
    add(p + "mlp.down_proj.bias", {d});
  }
  add("merger.ln_q.weight", {d}, true);
  add("merger.mlp.0.weight", {m, m});
  add("merger.mlp.0.bias", {m});
  add("merger.mlp.2.weight", {c.out_hidden_size, m});
  add("merger.mlp.2.bias", {c.out_hidden_size});
  return w;
}

Qwen25VlVision CreateOrDie(const Qwen25VlVisionConfig& c, const Weights& w) {
  auto m = Qwen25VlVision::Create(c, sharding::ShardedStateDict(0, 1, w, {}));
  if (!m.ok()) throw std::runtime_error(m.status().ToString());
  return *std::move(m);
}

torch::Tensor ForwardOrDie(const Qwen25VlVision& tower, const torch::Tensor& pixels,
                           const std::vector<Grid>& grids) {
  auto out = tower.Forward(pixels, GridTensor(grids));
  if (!out.ok()) throw std::runtime_error(out.status().ToString());
  return *out;
}

// ---------------------------------------------------------------------------------------------
// transformers' Qwen2_5_VisionTransformerPretrainedModel.forward written out op for op (the
// rot_pos_emb / get_window_index of modeling_qwen2_5_vl.py and the eager attention with its
// block-diagonal mask), independently of the implementation under test. Weights under "visual.".

torch::Tensor RefRmsNorm(const torch::Tensor& x, const torch::Tensor& w) {
  auto xf = x.to(torch::kFloat32);
  xf = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6);
  return w * xf.to(x.scalar_type());
}

torch::Tensor RefRotateHalf(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, h), x.slice(-1, 0, h)}, -1);
}

torch::Tensor ReferenceForward(const Qwen25VlVisionConfig& c, const Weights& weights,
                               const torch::Tensor& pixel_values, const std::vector<Grid>& grids) {
  torch::NoGradGuard no_grad;
  auto W = [&](const std::string& name) { return weights.at("visual." + name); };
  const int64_t d = c.hidden_size, m = c.spatial_merge_size, unit = m * m, heads = c.num_heads;
  const int64_t hd = d / heads, T = c.temporal_patch_size, P = c.patch_size;
  auto x = torch::conv3d(pixel_values.view({-1, c.in_channels, T, P, P}),
                         W("patch_embed.proj.weight"), {}, {T, P, P})
               .view({-1, d});

  std::vector<torch::Tensor> pos;
  int64_t max_side = 0;
  for (const auto& [t, h, w] : grids) {
    auto hpos = torch::arange(h).unsqueeze(1).expand({h, w});
    hpos = hpos.reshape({h / m, m, w / m, m}).permute({0, 2, 1, 3}).flatten();
    auto wpos = torch::arange(w).unsqueeze(0).expand({h, w});
    wpos = wpos.reshape({h / m, m, w / m, m}).permute({0, 2, 1, 3}).flatten();
    pos.push_back(torch::stack({hpos, wpos}, -1).repeat({t, 1}));
    max_side = std::max({max_side, h, w});
  }
  const int64_t dim = hd / 2;
  auto inv_freq = 1.0 / torch::pow(c.rope_theta, torch::arange(0, dim, 2, torch::kFloat32) / dim);
  auto table = torch::outer(torch::arange(max_side, torch::kFloat32), inv_freq);
  auto rotary = table.index({torch::cat(pos)}).flatten(1);

  std::vector<torch::Tensor> windows;
  std::vector<int64_t> cu_window = {0}, cu_full = {0};
  int64_t id = 0;
  const int64_t vm = c.window_size / m / P;
  for (const auto& [t, h, w] : grids) {
    const int64_t lh = h / m, lw = w / m, pad_h = vm - lh % vm, pad_w = vm - lw % vm;
    const int64_t nh = (lh + pad_h) / vm, nw = (lw + pad_w) / vm;
    auto padded = torch::constant_pad_nd(torch::arange(t * lh * lw).reshape({t, lh, lw}),
                                         {0, pad_w, 0, pad_h}, -100);
    padded =
        padded.reshape({t, nh, vm, nw, vm}).permute({0, 1, 3, 2, 4}).reshape({t, nh * nw, vm, vm});
    auto seqlens = padded.ne(-100).sum({2, 3}).reshape(-1);
    padded = padded.reshape(-1);
    windows.push_back(padded.index({padded.ne(-100)}) + id);
    auto cum = seqlens.cumsum(0) * unit + cu_window.back();
    for (int64_t i = 0; i < cum.numel(); ++i) cu_window.push_back(cum[i].item<int64_t>());
    id += t * lh * lw;
    for (int64_t f = 0; f < t; ++f) cu_full.push_back(cu_full.back() + h * w);
  }
  const auto window_index = torch::cat(windows);
  cu_window.erase(std::unique(cu_window.begin(), cu_window.end()), cu_window.end());

  const int64_t seq = x.size(0);
  x = x.reshape({seq / unit, unit, -1}).index({window_index}).reshape({seq, -1});
  rotary = rotary.reshape({seq / unit, unit, -1}).index({window_index}).reshape({seq, -1});
  const auto emb = torch::cat({rotary, rotary}, -1);
  const auto cos = emb.cos().unsqueeze(-2), sin = emb.sin().unsqueeze(-2);

  for (int64_t layer = 0; layer < c.depth; ++layer) {
    const std::string p = absl::StrCat("blocks.", layer, ".");
    const auto& cu = c.IsFullAttentionBlock(layer) ? cu_full : cu_window;
    auto qkv = torch::linear(RefRmsNorm(x, W(p + "norm1.weight")), W(p + "attn.qkv.weight"),
                             W(p + "attn.qkv.bias"))
                   .reshape({seq, 3, heads, -1})
                   .permute({1, 0, 2, 3})
                   .unbind(0);
    auto rope = [&](const torch::Tensor& t) {
      const auto f = t.to(torch::kFloat32);
      return (f * cos + RefRotateHalf(f) * sin).to(t.scalar_type());
    };
    auto q = rope(qkv[0]), k = rope(qkv[1]);
    auto mask = torch::full({1, seq, seq}, std::numeric_limits<float>::lowest());
    for (size_t i = 1; i < cu.size(); ++i) {
      mask.slice(1, cu[i - 1], cu[i]).slice(2, cu[i - 1], cu[i]).fill_(0);
    }
    auto scores = torch::matmul(q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2)) /
                  std::sqrt(static_cast<double>(hd));
    auto probs = torch::softmax(scores + mask, -1, torch::kFloat32).to(q.scalar_type());
    auto attn = torch::matmul(probs, qkv[2].transpose(0, 1)).transpose(0, 1).reshape({seq, -1});
    x = x + torch::linear(attn, W(p + "attn.proj.weight"), W(p + "attn.proj.bias"));
    auto h = RefRmsNorm(x, W(p + "norm2.weight"));
    auto gate =
        torch::silu(torch::linear(h, W(p + "mlp.gate_proj.weight"), W(p + "mlp.gate_proj.bias")));
    auto up = torch::linear(h, W(p + "mlp.up_proj.weight"), W(p + "mlp.up_proj.bias"));
    x = x + torch::linear(gate * up, W(p + "mlp.down_proj.weight"), W(p + "mlp.down_proj.bias"));
  }
  auto merged = RefRmsNorm(x, W("merger.ln_q.weight")).view({-1, d * unit});
  merged = torch::linear(merged, W("merger.mlp.0.weight"), W("merger.mlp.0.bias"));
  merged = torch::linear(torch::gelu(merged), W("merger.mlp.2.weight"), W("merger.mlp.2.bias"));
  return merged.index({torch::argsort(window_index)});
}

// max |got - want| <= tol * max(1, max |want|) (float32 rounding grows with the values' scale).
void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const auto g = got.to(torch::kFloat32), w = want.to(torch::kFloat32);
  const double scale = std::max(1.0, w.abs().max().item<double>());
  EXPECT_LE((g - w).abs().max().item<double>(), tol * scale)
      << "max |diff| " << (g - w).abs().max().item<float>() << ", max |want| "
      << w.abs().max().item<float>() << ", relative error " << testing::RelativeError(g, w);
}

// ---------------------------------------------------------------------------------------------
// The config.

nlohmann::json FixtureConfig() {
  auto j = ReadJsonObjectFile(TinyDir() + "/config.json");
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : nlohmann::json::object();
}

TEST(Qwen25VlVisionConfigTest, ReadsTheFixtureVisionConfig) {
  auto c = LoadQwen25VlVisionConfig(TinyDir());
  ASSERT_TRUE(c.ok()) << c.status();
  const nlohmann::json file = FixtureConfig();
  const nlohmann::json& v = file.at("vision_config");
  EXPECT_EQ(c->depth, v["depth"].get<int64_t>());
  EXPECT_EQ(c->hidden_size, v["hidden_size"].get<int64_t>());
  EXPECT_EQ(c->num_heads, v["num_heads"].get<int64_t>());
  EXPECT_EQ(c->intermediate_size, v["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c->out_hidden_size, v["out_hidden_size"].get<int64_t>());
  EXPECT_EQ(c->patch_size, v["patch_size"].get<int64_t>());
  EXPECT_EQ(c->spatial_merge_size, v["spatial_merge_size"].get<int64_t>());
  EXPECT_EQ(c->temporal_patch_size, v["temporal_patch_size"].get<int64_t>());
  EXPECT_EQ(c->window_size, v["window_size"].get<int64_t>());
  EXPECT_EQ(c->fullatt_block_indexes, v["fullatt_block_indexes"].get<std::vector<int64_t>>());
  EXPECT_EQ(c->hidden_act, Activation::kSilu);
  EXPECT_EQ(c->rope_theta, v["rope_parameters"]["rope_theta"].get<double>());
}

TEST(Qwen25VlVisionConfigTest, OptionalFieldsTakeTheClassDefaults) {
  auto j = FixtureConfig();
  for (const char* key :
       {"in_channels", "patch_size", "spatial_merge_size", "temporal_patch_size", "window_size",
        "fullatt_block_indexes", "hidden_act", "rope_parameters"}) {
    j["vision_config"].erase(key);
  }
  j["vision_config"]["in_chans"] = 3;  // an older config's name: not read by the class
  auto c = ParseQwen25VlVisionConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->in_channels, 3);
  EXPECT_EQ(c->patch_size, 14);
  EXPECT_EQ(c->spatial_merge_size, 2);
  EXPECT_EQ(c->temporal_patch_size, 2);
  EXPECT_EQ(c->window_size, 112);
  EXPECT_EQ(c->fullatt_block_indexes, (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_EQ(c->hidden_act, Activation::kSilu);
  EXPECT_EQ(c->rope_theta, 10000.0);
}

TEST(Qwen25VlVisionConfigTest, RefusesMissingAndWrongTypedFieldsNamingThem) {
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases = {
      {"hidden_size", nullptr, "vision_config.hidden_size' is missing"},
      {"depth", nullptr, "vision_config.depth' is missing"},
      {"num_heads", nullptr, "vision_config.num_heads' is missing"},
      {"depth", "1", "vision_config.depth' must be an integer"},
      {"intermediate_size", 32.5, "vision_config.intermediate_size'"},
      {"out_hidden_size", -32, "vision_config.out_hidden_size' must be a positive integer"},
      {"patch_size", nlohmann::json::array({14, 14}), "vision_config.patch_size'"},
      {"fullatt_block_indexes", "0", "vision_config.fullatt_block_indexes' must be a list"},
      {"fullatt_block_indexes", nlohmann::json::array({0.5}),
       "vision_config.fullatt_block_indexes'"},
      {"hidden_act", 3, "vision_config.hidden_act' must be a string"},
      {"hidden_act", "tanhh", "vision_config.hidden_act' is 'tanhh'"},
      {"model_type", "siglip_vision_model", "vision_config.model_type'"},
      {"rope_parameters", "axial", "vision_config.rope_parameters' must be an object"},
      {"rope_parameters", {{"rope_type", "yarn"}}, "vision_config.rope_parameters.rope_type'"},
      {"rope_parameters", {{"factor", 2.0}}, "vision_config.rope_parameters.factor'"},
      {"rope_parameters", {{"rope_theta", "1e4"}}, "vision_config.rope_parameters.rope_theta'"},
      {"num_heads", 3, "vision_config.hidden_size' (16) must be divisible by num_heads (3)"},
      {"num_heads", 8, "head_dim of 2"},
      {"window_size", 14, "vision_config.window_size' (14) must be at least"},
  };
  for (const auto& [key, value, message] : cases) {
    auto j = FixtureConfig();
    if (value.is_null()) {
      j["vision_config"].erase(key);
    } else {
      j["vision_config"][key] = value;
    }
    auto c = ParseQwen25VlVisionConfig(j.dump(), "te/config.json");
    ASSERT_FALSE(c.ok()) << key << " = " << value.dump();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("te/config.json: field '")) << key;
    EXPECT_THAT(c.status().message(), HasSubstr(message)) << key << " = " << value.dump();
  }
  auto j = FixtureConfig();
  j.erase("vision_config");
  EXPECT_THAT(ParseQwen25VlVisionConfig(j.dump()).status().message(),
              HasSubstr("field 'vision_config' is missing"));
  j["vision_config"] = nlohmann::json::array();
  EXPECT_THAT(ParseQwen25VlVisionConfig(j.dump()).status().message(),
              HasSubstr("field 'vision_config' must be an object"));
  j = FixtureConfig();
  j["model_type"] = "mistral3";
  EXPECT_THAT(ParseQwen25VlVisionConfig(j.dump()).status().message(),
              HasSubstr("field 'model_type' is 'mistral3'"));
}

// ---------------------------------------------------------------------------------------------
// The window layout.

TEST(Qwen25VlVisionLayoutTest, WindowOrderIsAPermutationThatRoundTrips) {
  const int64_t m = 2;
  for (int64_t vm : {1, 2, 4}) {
    const std::vector<VisionGrid> grids = {{1, 12, 10}, {2, 4, 8}, {1, 2, 2}, {1, 16, 16}};
    auto layout = ComputeVisionLayout(grids, m, vm);
    ASSERT_TRUE(layout.ok()) << layout.status();
    const int64_t n = TotalPatches(grids);
    ASSERT_EQ(layout->num_patches, n);
    ASSERT_EQ(layout->num_merged, n / 4);
    EXPECT_EQ(layout->merged_per_image, (std::vector<int64_t>{30, 16, 1, 64}));

    // Brute force: merged tokens sorted by (image, frame, window row, window column, row, column).
    std::vector<std::array<int64_t, 7>> keys;
    int64_t id = 0;
    for (size_t i = 0; i < grids.size(); ++i) {
      const auto& g = grids[i];
      for (int64_t f = 0; f < g.t; ++f) {
        for (int64_t r = 0; r < g.h / m; ++r) {
          for (int64_t c = 0; c < g.w / m; ++c) {
            keys.push_back({static_cast<int64_t>(i), f, r / vm, c / vm, r, c, id++});
          }
        }
      }
    }
    std::sort(keys.begin(), keys.end());
    std::vector<int64_t> expected_index, expected_cu = {0};
    for (size_t i = 0; i < keys.size(); ++i) {
      expected_index.push_back(keys[i][6]);
      const bool last_of_window =
          i + 1 == keys.size() ||
          !std::equal(keys[i].begin(), keys[i].begin() + 4, keys[i + 1].begin());
      if (last_of_window) expected_cu.push_back(static_cast<int64_t>(i + 1) * 4);
    }
    EXPECT_EQ(layout->window_index, expected_index) << "vm " << vm;
    EXPECT_EQ(layout->cu_window_seqlens, expected_cu) << "vm " << vm;
    EXPECT_EQ(layout->cu_seqlens, (std::vector<int64_t>{0, 120, 152, 184, 188, 444}));

    auto x = Randn({n, 3}, 7);
    auto wi = torch::tensor(layout->window_index, torch::kLong);
    auto ri = torch::tensor(layout->reverse_index, torch::kLong);
    auto windowed = PermuteRowGroups(x, wi, 4);
    if (vm > 1) EXPECT_FALSE(torch::equal(windowed, x));
    EXPECT_TRUE(torch::equal(PermuteRowGroups(windowed, ri, 4), x));
    // Each merged token keeps its patches together: block i of the result is block wi[i] of x.
    EXPECT_TRUE(torch::equal(windowed.slice(0, 4, 8), x.slice(0, 4 * layout->window_index[1],
                                                              4 * layout->window_index[1] + 4)));
  }
}

TEST(Qwen25VlVisionLayoutTest, PositionsAreBlockMajorRowsAndColumns) {
  auto layout = ComputeVisionLayout({{2, 4, 6}}, 2, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const auto& pos = layout->position_ids;
  ASSERT_EQ(pos.size(), 2u * 48);
  for (int64_t p = 0; p < 48; ++p) {
    const int64_t frame_p = p % 24, token = frame_p / 4, in = frame_p % 4;
    EXPECT_EQ(pos[2 * p], (token / 3) * 2 + in / 2) << p;
    EXPECT_EQ(pos[2 * p + 1], (token % 3) * 2 + in % 2) << p;
  }
}

TEST(Qwen25VlVisionLayoutTest, RefusesBadGrids) {
  EXPECT_FALSE(GridsFromTensor(torch::tensor({1, 4, 4}), 2).ok());
  EXPECT_FALSE(GridsFromTensor(torch::tensor({1.0, 4.0, 4.0}).view({1, 3}), 2).ok());
  EXPECT_FALSE(GridsFromTensor(torch::zeros({0, 3}, torch::kLong), 2).ok());
  EXPECT_THAT(GridsFromTensor(GridTensor({{1, 4, 4}, {1, 4, 5}}), 2).status().message(),
              HasSubstr("grid_thw row 1"));
  EXPECT_THAT(GridsFromTensor(GridTensor({{0, 4, 4}}), 2).status().message(), HasSubstr("t = 0"));
  EXPECT_TRUE(GridsFromTensor(GridTensor({{1, 4, 6}}).to(torch::kInt), 2).ok());
}

TEST(Qwen25VlVisionAttentionTest, SegmentsMatchAPerSegmentLoop) {
  const std::vector<int64_t> cu = {0, 16, 16, 32, 36, 52, 60, 76};
  auto q = Randn({76, 2, 8}, 1), k = Randn({76, 2, 8}, 2), v = Randn({76, 2, 8}, 3);
  auto got = VisionSegments::Build(cu, torch::kCPU).Attend(q, k, v);
  std::vector<torch::Tensor> parts;
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] == cu[i - 1]) continue;
    auto split = [&](const torch::Tensor& t) {
      return t.slice(0, cu[i - 1], cu[i]).transpose(0, 1);
    };
    parts.push_back(
        compat::ScaledDotProductAttention(split(q), split(k), split(v)).transpose(0, 1));
  }
  ExpectClose(got, torch::cat(parts).reshape({76, 16}), 1e-6);
  EXPECT_EQ(VisionSegments::Build(cu, torch::kCPU).num_segments(), 6);
}

// ---------------------------------------------------------------------------------------------
// The tower.

TEST(Qwen25VlVisionTest, LoadsTheFixtureTowerAndGivesOneRowPerMergedToken) {
  auto tower = Qwen25VlVision::Load(TinyDir());
  ASSERT_TRUE(tower.ok()) << tower.status();
  EXPECT_EQ(tower->prefix(), "visual.");
  EXPECT_EQ(tower->dtype(), torch::kFloat32);
  const auto& c = tower->config();
  int64_t expected_bytes = 0;
  const auto all = testing::LoadComponentFullFloat32(TinyDir());
  for (const auto& [name, t] : all.tensors()) {
    if (name.rfind("visual.", 0) == 0) expected_bytes += t.numel() * 4;
  }
  EXPECT_EQ(static_cast<int64_t>(tower->weight_bytes()), expected_bytes);

  const std::vector<Grid> one = {{1, 4, 6}}, two = {{1, 4, 6}, {1, 10, 2}};
  auto a = ForwardOrDie(*tower, Randn({Patches(one), c.patch_dim()}, 11), one);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{6, c.out_hidden_size}));
  auto b = ForwardOrDie(*tower, Randn({Patches(two), c.patch_dim()}, 12), two);
  EXPECT_EQ(b.sizes(), (std::vector<int64_t>{11, c.out_hidden_size}));
  EXPECT_TRUE(torch::isfinite(b).all().item<bool>());
}

TEST(Qwen25VlVisionTest, FixtureTowerAgreesWithTheWrittenOutReference) {
  auto tower = Qwen25VlVision::Load(TinyDir());
  ASSERT_TRUE(tower.ok()) << tower.status();
  const auto weights = testing::LoadComponentFullFloat32(TinyDir()).tensors();
  const std::vector<Grid> grids = {{1, 12, 10}, {1, 4, 4}, {2, 2, 6}};
  auto pixels = Randn({Patches(grids), tower->config().patch_dim()}, 21);
  ExpectClose(ForwardOrDie(*tower, pixels, grids),
              ReferenceForward(tower->config(), weights, pixels, grids));
}

TEST(Qwen25VlVisionTest, WindowAttentionTowerAgreesWithTheWrittenOutReference) {
  // Window blocks around a full-attention one; grids with partial windows, a padding row of empty
  // windows (lh % vm == 0) and two frames.
  const auto config = SmallConfig(3, {1});
  const auto weights = RandomTower(config, "visual.", 100);
  const auto tower = CreateOrDie(config, weights);
  const std::vector<Grid> grids = {{1, 10, 6}, {1, 4, 4}, {2, 6, 4}, {1, 2, 2}};
  auto pixels = Randn({Patches(grids), config.patch_dim()}, 22);
  const auto got = ForwardOrDie(tower, pixels, grids);
  ExpectClose(got, ReferenceForward(config, weights, pixels, grids));
  // The windows matter: the same weights with every block attending over whole frames differ.
  const auto full = CreateOrDie(SmallConfig(3, {0, 1, 2}), weights);
  EXPECT_FALSE(torch::allclose(ForwardOrDie(full, pixels, grids), got, 1e-3, 1e-3));
}

TEST(Qwen25VlVisionTest, SeveralImagesEqualEachImageAlone) {
  for (bool fixture : {true, false}) {
    const auto config = fixture ? *LoadQwen25VlVisionConfig(TinyDir()) : SmallConfig(2, {1});
    const auto tower = fixture ? *Qwen25VlVision::Load(TinyDir())
                               : CreateOrDie(config, RandomTower(config, "visual.", 200));
    const std::vector<Grid> grids = {{1, 6, 8}, {1, 12, 4}, {1, 2, 2}};
    auto pixels = Randn({Patches(grids), config.patch_dim()}, 23);
    const auto together = ForwardOrDie(tower, pixels, grids);
    std::vector<torch::Tensor> alone;
    int64_t row = 0;
    for (const Grid& g : grids) {
      const int64_t rows = g[0] * g[1] * g[2];
      alone.push_back(ForwardOrDie(tower, pixels.slice(0, row, row + rows), {g}));
      row += rows;
    }
    ExpectClose(together, torch::cat(alone));
  }
}

TEST(Qwen25VlVisionTest, WindowAttentionStaysWithinTheWindow) {
  // One window-attention block: changing the patches of one window changes that window's merged
  // tokens only. With full attention instead, every token of the frame changes.
  const std::vector<Grid> grids = {{1, 8, 8}};  // 4 x 4 merged tokens, windows of 2 x 2
  const auto config = SmallConfig(1, {});
  const auto weights = RandomTower(config, "visual.", 300);
  auto pixels = Randn({Patches(grids), config.patch_dim()}, 24);
  auto changed = pixels.clone();
  changed.slice(0, 0, 4).add_(1.0);  // merged token 0: (row 0, column 0), the top-left window
  const std::vector<int64_t> top_left = {0, 1, 4, 5};
  for (bool windowed : {true, false}) {
    const auto tower = CreateOrDie(windowed ? config : SmallConfig(1, {0}), weights);
    const auto before = ForwardOrDie(tower, pixels, grids),
               after = ForwardOrDie(tower, changed, grids);
    for (int64_t t = 0; t < 16; ++t) {
      const bool inside = std::count(top_left.begin(), top_left.end(), t) > 0;
      const bool same = torch::allclose(before[t], after[t], 1e-6, 1e-6);
      EXPECT_EQ(same, windowed && !inside)
          << "token " << t << (windowed ? " (windows)" : " (full)");
    }
  }
}

TEST(Qwen25VlVisionTest, RunsInBfloat16) {
  sharding::LoadOptions opts;
  opts.dtype = torch::kBFloat16;
  auto bf16 = Qwen25VlVision::Load(TinyDir(), opts);
  auto fp32 = Qwen25VlVision::Load(TinyDir());
  ASSERT_TRUE(bf16.ok() && fp32.ok()) << bf16.status() << fp32.status();
  const std::vector<Grid> grids = {{1, 12, 10}};
  auto pixels = Randn({Patches(grids), fp32->config().patch_dim()}, 25);
  const auto low = ForwardOrDie(*bf16, pixels, grids);
  EXPECT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_LT(testing::RelativeError(low, ForwardOrDie(*fp32, pixels, grids)), 3e-2);
}

TEST(Qwen25VlVisionTest, LoadsTheTransformers5LayoutAndReadsOnlyTheTower) {
  TempDir dir;
  const auto config = SmallConfig(2, {1});
  auto weights = RandomTower(config, "model.visual.", 400);
  weights["model.language_model.embed_tokens.weight"] = Randn({8, 4}, 1);
  nlohmann::json json = {
      {"architectures", nlohmann::json::array({"Qwen2_5_VLForConditionalGeneration"})},
      {"model_type", "qwen2_5_vl"},
      {"vision_config",
       {{"depth", 2},
        {"hidden_size", 32},
        {"num_heads", 4},
        {"intermediate_size", 48},
        {"out_hidden_size", 24},
        {"patch_size", 2},
        {"window_size", 8},
        {"fullatt_block_indexes", nlohmann::json::array({1})},
        {"model_type", "qwen2_5_vl_vision"}}}};
  testing::WriteComponent(dir.path(), json, weights);
  auto tower = Qwen25VlVision::Load(dir.path());
  ASSERT_TRUE(tower.ok()) << tower.status();
  EXPECT_EQ(tower->prefix(), "model.visual.");
  const std::vector<Grid> grids = {{1, 6, 4}};
  auto pixels = Randn({Patches(grids), config.patch_dim()}, 26);
  auto in_memory = CreateOrDie(config, weights);
  ExpectClose(ForwardOrDie(*tower, pixels, grids), ForwardOrDie(in_memory, pixels, grids), 0);
  EXPECT_EQ(tower->weight_bytes(), in_memory.weight_bytes());

  // No tower in the checkpoint; a tower tensor of the wrong shape.
  TempDir empty;
  testing::WriteComponent(empty.path(), json,
                          {{"model.language_model.embed_tokens.weight", Randn({8, 4}, 1)}});
  auto none = Qwen25VlVision::Load(empty.path());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr(empty.path()));
  weights["model.visual.blocks.1.attn.qkv.bias"] = Randn({95}, 1);
  TempDir bad;
  testing::WriteComponent(bad.path(), json, weights);
  EXPECT_THAT(Qwen25VlVision::Load(bad.path()).status().message(),
              HasSubstr("model.visual.blocks.1.attn.qkv.bias"));
}

TEST(Qwen25VlVisionTest, RefusesBadInputs) {
  auto tower = Qwen25VlVision::Load(TinyDir());
  ASSERT_TRUE(tower.ok()) << tower.status();
  const int64_t dim = tower->config().patch_dim();
  auto code = [&](const torch::Tensor& pixels, const torch::Tensor& grid) {
    return tower->Forward(pixels, grid).status().code();
  };
  const auto grid = GridTensor({{1, 4, 6}});
  EXPECT_EQ(code(Randn({24, dim}, 1), grid), absl::StatusCode::kOk);
  EXPECT_EQ(code(Randn({24, dim - 1}, 1), grid), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Randn({25, dim}, 1), grid), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Randn({24, dim}, 1).to(torch::kLong), grid), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Randn({24, dim}, 1), GridTensor({{1, 3, 8}})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Randn({24, dim}, 1), torch::tensor({1, 4, 6})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(torch::Tensor(), grid), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ditserve::text
