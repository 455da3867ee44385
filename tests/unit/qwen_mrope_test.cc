// Qwen2.5-VL's multimodal prompt on the language-model side (issue 34): the M-RoPE position ids of
// transformers 5.17's get_rope_index (expected values derived by hand from its code, quoted), the
// M-RoPE rotary tables against 5.17's recomposition, and CausalLmTextEncoder's image-embedding
// forward on the qwenimage-tiny text encoder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "comm/local_communicator.h"
#include "models/text/causal_lm_config.h"
#include "models/text/causal_lm_encoder.h"
#include "models/text/causal_lm_inputs.h"
#include "models/text/causal_lm_loader.h"
#include "models/text/llm_rope.h"
#include "models/text/mrope_position_ids.h"
#include "tests/support/fixtures.h"

namespace ditserve::text {
namespace {

using testing::FixturesDir;
using ::testing::HasSubstr;

torch::Tensor Rows(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<torch::Tensor> t;
  for (const auto& r : rows) t.push_back(torch::tensor(r, torch::kLong));
  return torch::stack(t);
}

constexpr int64_t kImg = 9;

// ---------------------------------------------------------------------------------------------
// Position ids (modeling_qwen2_vl.py, transformers 5.17, get_rope_index / get_vision_position_ids):
//   if modality_type == 0:
//       llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + current_pos)
//       current_pos += text_len
//   else:
//       vision_position_ids = self.get_vision_position_ids(current_pos, grid_thw, 1,
//       spatial_merge_size) current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size
// get_vision_position_ids:
//   llm_grid_t, llm_grid_h, llm_grid_w = t // temp_merge_size, h // spatial_merge_size, w // ...
//   position_temporal = torch.arange(llm_grid_t) * time_interval
//   position_height = torch.arange(llm_grid_h) + start_position
//   position_width = torch.arange(llm_grid_w) + start_position
//   T_grid, H_grid, W_grid = torch.meshgrid(..., indexing="ij") -> stack -> reshape(3, -1)
//   vision_position_ids[0] += start_position

TEST(MropePositionIdsTest, OneImage) {
  // [1, 2, img x 6, 3, 4], grid (1, 4, 6), merge 2 -> llm grid (1, 2, 3) = 6 tokens.
  // text [1, 2]: arange(2) + 0 = 0, 1; current_pos = 2.
  // image: T = arange(1)*1 + 2 = 2; H = arange(2) + 2 = [2, 3]; W = arange(3) + 2 = [2, 3, 4];
  //   meshgrid "ij" flattened: T 2 2 2 2 2 2 / H 2 2 2 3 3 3 / W 2 3 4 2 3 4;
  //   current_pos += max(4, 6) // 2 = 3 -> 5.
  // text [3, 4]: 5, 6.
  auto ids = torch::tensor({{1, 2, 9, 9, 9, 9, 9, 9, 3, 4}}, torch::kLong);
  auto pos = MropePositionIds(ids, torch::Tensor(), kImg, {{1, 4, 6}}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  auto want = Rows({{0, 1, 2, 2, 2, 2, 2, 2, 5, 6},
                    {0, 1, 2, 2, 2, 3, 3, 3, 5, 6},
                    {0, 1, 2, 3, 4, 2, 3, 4, 5, 6}})
                  .unsqueeze(1);
  EXPECT_EQ(pos->scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(*pos, want)) << *pos;
  // An all-ones mask is the same as none.
  auto masked = MropePositionIds(ids, torch::ones_like(ids), kImg, {{1, 4, 6}}, 2);
  ASSERT_TRUE(masked.ok());
  EXPECT_TRUE(torch::equal(*masked, want));
}

TEST(MropePositionIdsTest, TwoImagesWithTextBetweenLeftPaddedBatch) {
  // One grid iterator over the batch: grid_iters = {1: iter(image_grid_thw)}.
  // Row 0, left-padded by 2: current_input_ids = current_input_ids[attention_mask[b].bool()]
  //   text [1] (col 2): 0; current_pos 1.
  //   image (1, 4, 4) -> (1, 2, 2), cols 3..6: T 1 1 1 1 / H 1 1 2 2 / W 1 2 1 2;
  //     current_pos += max(4, 4) // 2 = 2 -> 3.
  //   text [2, 3] (cols 7, 8): 3, 4; current_pos 5.
  //   image (1, 2, 4) -> (1, 1, 2), cols 9, 10: T 5 5 / H 5 5 / W 5 6;
  //     current_pos += max(2, 4) // 2 = 2 -> 7.
  //   text [4] (col 11): 7.
  //   pads (cols 0, 1): position_ids = torch.zeros(...); only position_ids[:, b, mask] is set -> 0.
  // Row 1, no padding:
  //   text [1]: 0; current_pos 1.
  //   image (1, 4, 2) -> (1, 2, 1), cols 1, 2: T 1 1 / H 1 2 / W 1 1; current_pos += 4 // 2 -> 3.
  //   text (9 tokens, cols 3..11): 3 .. 11.
  auto ids = torch::tensor(
      {{0, 0, 1, 9, 9, 9, 9, 2, 3, 9, 9, 4}, {1, 9, 9, 2, 3, 4, 5, 6, 7, 8, 1, 2}}, torch::kLong);
  auto mask = torch::tensor(
      {{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, torch::kLong);
  auto pos = MropePositionIds(ids, mask, kImg, {{1, 4, 4}, {1, 2, 4}, {1, 4, 2}}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  auto want = torch::stack(
      {Rows({{0, 0, 0, 1, 1, 1, 1, 3, 4, 5, 5, 7}, {0, 1, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11}}),
       Rows({{0, 0, 0, 1, 1, 2, 2, 3, 4, 5, 5, 7}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}),
       Rows({{0, 0, 0, 1, 2, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11}})});
  EXPECT_TRUE(torch::equal(*pos, want)) << *pos;
  // A bool mask gives the same.
  auto b = MropePositionIds(ids, mask.to(torch::kBool), kImg, {{1, 4, 4}, {1, 2, 4}, {1, 4, 2}}, 2);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(torch::equal(*b, want));
}

TEST(MropePositionIdsTest, TemporalGridDoesNotAdvanceTheTextPosition) {
  // grid (2, 2, 2), merge 2 -> (2, 1, 1): T = arange(2) * 1 + 1 = [1, 2], H = W = [1];
  // current_pos += max(2, 2) // 2 = 1 -> 2: 5.17 advances by the spatial extent only, so the next
  // text token shares position 2 with the second temporal slice.
  auto ids = torch::tensor({{5, 9, 9, 6}}, torch::kLong);
  auto pos = MropePositionIds(ids, torch::Tensor(), kImg, {{2, 2, 2}}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_TRUE(torch::equal(*pos, Rows({{0, 1, 2, 2}, {0, 1, 1, 2}, {0, 1, 1, 2}}).unsqueeze(1)));
}

TEST(MropePositionIdsTest, TextOnlyIsArangeOnEveryAxis) {
  // No image run: torch.arange(text_len).expand(3, -1); pads stay 0.
  auto ids = torch::tensor({{0, 4, 5, 6}}, torch::kLong);
  auto pos = MropePositionIds(ids, torch::tensor({{0, 1, 1, 1}}), kImg, {}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_TRUE(torch::equal(*pos, Rows({{0, 0, 1, 2}, {0, 0, 1, 2}, {0, 0, 1, 2}}).unsqueeze(1)));
}

TEST(MropePositionIdsTest, RefusesRunsThatDoNotMatchTheGrids) {
  auto ids = torch::tensor({{1, 9, 9, 9, 2}}, torch::kLong);
  auto wrong = MropePositionIds(ids, torch::Tensor(), kImg, {{1, 4, 4}}, 2);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("has 3 image tokens"));
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("makes 4"));
  auto none = MropePositionIds(ids, torch::Tensor(), kImg, {}, 2);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no image grid left"));
  auto extra = MropePositionIds(ids, torch::Tensor(), kImg, {{1, 2, 6}, {1, 2, 2}}, 2);
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(std::string(extra.status().message()), HasSubstr("2 image grids given"));
  // Two images with no text between are one run (groupby over mm_token_type_ids): refused.
  auto adjacent = MropePositionIds(torch::tensor({{1, 9, 9, 2}}, torch::kLong), torch::Tensor(),
                                   kImg, {{1, 2, 2}, {1, 2, 2}}, 2);
  EXPECT_FALSE(adjacent.ok());
  EXPECT_FALSE(MropePositionIds(ids, torch::tensor({{1, 2, 1, 1, 1}}), kImg, {{1, 2, 6}}, 2).ok());
  EXPECT_FALSE(MropePositionIds(ids, torch::Tensor(), kImg, {{1, 2, 6}}, 0).ok());
}

// ---------------------------------------------------------------------------------------------
// Rotary tables. transformers 5.17, Qwen2VLRotaryEmbedding.forward / recomposition_frequencies:
//   freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(2, 3)
//   cos = freqs.cos() * self.attention_scaling
//   freq = torch.cat([m[i % 3] for i, m in enumerate(freq.split(self.mrope_section, dim=-1))], -1)
//   return torch.cat((freq, freq), dim=-1)
// i.e. the chunked-sections layout over d/2 (not Qwen3-VL's interleaved one), duplicated.

LlmRope Reference517(const torch::Tensor& pos3, int64_t d, double theta,
                     const std::vector<int64_t>& section, torch::ScalarType dtype) {
  auto inv = LlmInvFreq(d, theta, torch::kCPU);
  auto freqs = pos3.to(torch::kFloat).unsqueeze(-1) * inv;  // (3, B, T, d/2)
  auto recompose = [&](const torch::Tensor& f) {
    auto chunks = f.split_with_sizes(section, -1);
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < chunks.size(); ++i) parts.push_back(chunks[i][i % 3]);
    auto r = torch::cat(parts, -1);
    return torch::cat({r, r}, -1);
  };
  return LlmRope{recompose(freqs.cos() * 1.0).to(dtype).unsqueeze(1),
                 recompose(freqs.sin() * 1.0).to(dtype).unsqueeze(1)};
}

TEST(QwenMropeRotaryTest, EqualRowsAreThePlainRopeBitForBit) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto pos = torch::randint(0, 5000, {2, 40}, torch::kLong);
    auto plain = LlmRopeTables(pos, 128, 1e6, {}, dtype);
    auto mrope = LlmRopeTables(pos.unsqueeze(0).expand({3, 2, 40}), 128, 1e6, {16, 24, 24}, dtype);
    EXPECT_TRUE(torch::equal(plain.cos, mrope.cos));
    EXPECT_TRUE(torch::equal(plain.sin, mrope.sin));
    auto x = torch::randn({2, 4, 40, 128}).to(dtype);
    EXPECT_TRUE(torch::equal(ApplyLlmRope(x, plain), ApplyLlmRope(x, mrope)));
  }
}

TEST(QwenMropeRotaryTest, DistinctRowsFollowTransformers517Recomposition) {
  auto ids = torch::tensor({{0, 0, 1, 9, 9, 9, 9, 2, 3, 9, 9, 4}}, torch::kLong);
  auto pos = MropePositionIds(ids, torch::tensor({{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}), kImg,
                              {{1, 4, 4}, {1, 2, 4}}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  for (const auto& [d, section] :
       std::vector<std::pair<int64_t, std::vector<int64_t>>>{{8, {2, 1, 1}}, {128, {16, 24, 24}}}) {
    auto ours = LlmRopeTables(*pos, d, 1e6, section, torch::kFloat);
    auto ref = Reference517(*pos, d, 1e6, section, torch::kFloat);
    EXPECT_TRUE(torch::equal(ours.cos, ref.cos)) << d;
    EXPECT_TRUE(torch::equal(ours.sin, ref.sin)) << d;
  }
}

// ---------------------------------------------------------------------------------------------
// The encoder on qwenimage-tiny's text encoder (image_token_id 746, hidden 32, mrope [2, 1, 1]).

std::string QwenTextEncoderDir() {
  return FixturesDir() + "/qwenimage-tiny/text_encoder";
}

struct Run {
  absl::Status status;
  std::vector<torch::Tensor> hidden;  // rank 0's
  bool ranks_agree = true;
};

Run RunEncoder(int world, const torch::Tensor& ids, const torch::Tensor& mask,
               const std::vector<int64_t>& indices, const LlmMultimodalInputs* mm) {
  Run out;
  std::mutex mu;
  std::map<int, std::vector<torch::Tensor>> per_rank;
  out.status = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    auto loaded = LoadCausalLmTextEncoder(QwenTextEncoderDir(), &c, sharding::LoadOptions());
    if (!loaded.ok()) return loaded.status();
    auto h = mm == nullptr ? loaded->model->Forward(ids, mask, indices)
                           : loaded->model->Forward(ids, mask, indices, *mm);
    if (!h.ok()) return h.status();
    std::lock_guard<std::mutex> lock(mu);
    per_rank[c.rank()] = *h;
    return absl::OkStatus();
  });
  if (!out.status.ok()) return out;
  out.hidden = per_rank[0];
  for (const auto& [r, h] : per_rank) {
    for (size_t i = 0; i < h.size(); ++i) out.ranks_agree &= torch::equal(h[i], out.hidden[i]);
  }
  return out;
}

class QwenMultimodalEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(QwenTextEncoderDir())) GTEST_SKIP() << "no qwenimage-tiny";
    auto cfg = LoadCausalLmConfig(QwenTextEncoderDir());
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    cfg_ = *cfg;
  }
  CausalLmConfig cfg_;
};

TEST_F(QwenMultimodalEncoderTest, ConfigReadsTheImageToken) {
  EXPECT_EQ(cfg_.image_token_id, 746);
  EXPECT_EQ(cfg_.mrope_section, (std::vector<int64_t>{2, 1, 1}));
}

TEST_F(QwenMultimodalEncoderTest, ZeroImagesIsTodaysForwardBitForBit) {
  torch::Tensor ids, mask;
  if (std::filesystem::exists(FixturesDir() + "/reference.safetensors") &&
      testing::Reference().count("qwenimage.pipe.input_ids")) {
    ids = testing::Ref("qwenimage.pipe.input_ids");
    mask = testing::Ref("qwenimage.pipe.attention_mask");
  } else {
    ids = torch::randint(0, 700, {1, 20}, torch::kLong);
    mask = torch::ones_like(ids);
  }
  // A right-padded second row, so that padding is covered.
  const int64_t t = ids.size(1);
  auto ids2 = torch::cat({ids, ids}, 0);
  auto mask2 = torch::cat({mask, mask}, 0);
  mask2[1].narrow(0, t - 5, 5).fill_(0);
  ids2[1].narrow(0, t - 5, 5).fill_(734);
  auto today = RunEncoder(1, ids2, mask2, {0, 1, -1}, nullptr);
  ASSERT_TRUE(today.status.ok()) << today.status;

  // Today's own positions through the multimodal entry: the whole output is identical.
  LlmMultimodalInputs same{torch::zeros({0, cfg_.hidden_size}),
                           CausalLmPositionIds(cfg_, mask2, 2, t, torch::kCPU)};
  auto a = RunEncoder(1, ids2, mask2, {0, 1, -1}, &same);
  ASSERT_TRUE(a.status.ok()) << a.status;
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(a.hidden[i], today.hidden[i])) << i;

  // get_rope_index's positions without images differ only at the pads (0 there, 1 in the text
  // path): every real token is bit-identical.
  auto pos = MropePositionIds(ids2, mask2, cfg_.image_token_id, {}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  LlmMultimodalInputs none{torch::zeros({0, cfg_.hidden_size}), *pos};
  for (int world : {1, 2}) {
    auto b = RunEncoder(world, ids2, mask2, {0, 1, -1}, &none);
    ASSERT_TRUE(b.status.ok()) << b.status;
    EXPECT_TRUE(b.ranks_agree);
    if (world > 1) continue;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::equal(b.hidden[i][0], today.hidden[i][0])) << i;
      EXPECT_TRUE(
          torch::equal(b.hidden[i][1].narrow(0, 0, t - 5), today.hidden[i][1].narrow(0, 0, t - 5)))
          << i;
    }
  }
}

TEST_F(QwenMultimodalEncoderTest, ImageRowsReplaceTheImageTokensInOrder) {
  const int img = static_cast<int>(cfg_.image_token_id);
  // Two prompts: [text, 4 image tokens, text, 2 image tokens, text] and [text, 2 image tokens,
  // text]; image_embeds' rows go to the image tokens row-major over (B, T).
  auto ids = torch::tensor({{10, 11, img, img, img, img, 12, 13, img, img, 14},
                            {20, img, img, 21, 22, 23, 24, 25, 26, 27, 28}},
                           torch::kLong);
  auto mask = torch::ones_like(ids);
  auto pos = MropePositionIds(ids, mask, img, {{1, 4, 4}, {1, 2, 4}, {1, 4, 2}}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  torch::manual_seed(5);
  auto embeds = torch::randn({8, cfg_.hidden_size});
  LlmMultimodalInputs mm{embeds, *pos};
  auto run = RunEncoder(1, ids, mask, {0, -1}, &mm);
  ASSERT_TRUE(run.status.ok()) << run.status;
  auto text = RunEncoder(1, ids, mask, {0, -1}, nullptr);
  ASSERT_TRUE(text.status.ok()) << text.status;

  const auto& h0 = run.hidden[0];
  const std::vector<std::pair<int64_t, int64_t>> image_cells = {{0, 2}, {0, 3}, {0, 4}, {0, 5},
                                                                {0, 8}, {0, 9}, {1, 1}, {1, 2}};
  for (size_t r = 0; r < image_cells.size(); ++r) {
    const auto [b, t] = image_cells[r];
    EXPECT_TRUE(torch::equal(h0[b][t], embeds[static_cast<int64_t>(r)])) << b << "," << t;
  }
  auto is_image = ids.eq(img);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < ids.size(1); ++t) {
      if (is_image[b][t].item<bool>()) continue;
      EXPECT_TRUE(torch::equal(h0[b][t], text.hidden[0][b][t])) << b << "," << t;
    }
  }
  // The image rows and positions reach the layers: the output moves.
  EXPECT_FALSE(torch::allclose(run.hidden[1], text.hidden[1]));
  // Same embeddings with text positions: a different result, so the 3-D positions are used.
  LlmMultimodalInputs flat{embeds, CausalLmPositionIds(cfg_, mask, 2, ids.size(1), torch::kCPU)};
  auto f = RunEncoder(1, ids, mask, {-1}, &flat);
  ASSERT_TRUE(f.status.ok()) << f.status;
  EXPECT_FALSE(torch::equal(f.hidden[0], run.hidden[1]));
  // Under tensor parallelism every rank returns the same, close to tp 1.
  auto tp2 = RunEncoder(2, ids, mask, {0, -1}, &mm);
  ASSERT_TRUE(tp2.status.ok()) << tp2.status;
  EXPECT_TRUE(tp2.ranks_agree);
  EXPECT_TRUE(torch::equal(tp2.hidden[0], h0));
  EXPECT_LT(testing::RelativeError(tp2.hidden[1], run.hidden[1]), 1e-5);
}

TEST_F(QwenMultimodalEncoderTest, RefusesACountMismatchAndBadShapes) {
  const int img = static_cast<int>(cfg_.image_token_id);
  auto ids = torch::tensor({{10, img, img, img, img, 11}}, torch::kLong);
  auto pos = MropePositionIds(ids, torch::Tensor(), img, {{1, 4, 4}}, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  LlmMultimodalInputs five{torch::randn({5, cfg_.hidden_size}), *pos};
  auto r = RunEncoder(1, ids, torch::Tensor(), {-1}, &five);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("4 image tokens (id 746)"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("image_embeds has 5 rows"));

  LlmMultimodalInputs narrow{torch::randn({4, cfg_.hidden_size + 1}), *pos};
  EXPECT_THAT(std::string(RunEncoder(1, ids, torch::Tensor(), {-1}, &narrow).status.message()),
              HasSubstr("image_embeds has shape"));
  LlmMultimodalInputs flat{torch::randn({4, cfg_.hidden_size}), (*pos)[0]};
  EXPECT_THAT(std::string(RunEncoder(1, ids, torch::Tensor(), {-1}, &flat).status.message()),
              HasSubstr("position_ids has shape"));
}

}  // namespace
}  // namespace ditserve::text
