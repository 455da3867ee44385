// pipeline/qwen_edit_prompt.h: QwenImageEditPlusPipeline's templated text (diffusers 58eb52c0),
// Qwen2VLProcessor's <|image_pad|> expansion (transformers 5.17) and the tokenized batch on the
// qwenimage-tiny fixture tokenizer. Structure only: reference ids come with the edit fixtures.
#include "pipeline/qwen_edit_prompt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "models/tokenizers/hf_tokenizer_loader.h"
#include "tests/support/fixtures.h"

namespace ditserve::pipeline {
namespace {

constexpr char kSystem[] =
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter or "
    "modify the image. Generate a new image that meets the user's requirements while maintaining "
    "consistency with the original input where appropriate.<|im_end|>\n<|im_start|>user\n";
constexpr char kTail[] = "<|im_end|>\n<|im_start|>assistant\n";

std::string Repeat(const std::string& s, int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

const tokenizers::HfTokenizer& Tokenizer() {
  static const tokenizers::HfTokenizer* tok = [] {
    auto t = tokenizers::LoadHfTokenizer(testing::FixturesDir() + "/qwenimage-tiny/tokenizer");
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) std::abort();
    return new tokenizers::HfTokenizer(*std::move(t));
  }();
  return *tok;
}

int64_t Id(const char* token) {
  auto id = Tokenizer().TokenToId(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(QwenEditPromptTest, DropIndexIsDiffusers) {
  EXPECT_EQ(kQwenEditTemplateStartIdx, 64);
}

TEST(QwenEditPromptTest, TemplatedTextForZeroOneTwoImages) {
  EXPECT_EQ(QwenEditImagePrompt(0), "");
  EXPECT_EQ(QwenEditTemplatedPrompt("make it red", 0),
            std::string(kSystem) + "make it red" + kTail);
  EXPECT_EQ(QwenEditTemplatedPrompt("make it red", 1),
            std::string(kSystem) + "Picture 1: <|vision_start|><|image_pad|><|vision_end|>" +
                "make it red" + kTail);
  EXPECT_EQ(QwenEditTemplatedPrompt("swap them", 2),
            std::string(kSystem) + "Picture 1: <|vision_start|><|image_pad|><|vision_end|>" +
                "Picture 2: <|vision_start|><|image_pad|><|vision_end|>" + "swap them" + kTail);
  // str.format does not re-read what it inserts.
  EXPECT_EQ(QwenEditTemplatedPrompt("a {} b", 0), std::string(kSystem) + "a {} b" + kTail);
}

// QwenImageEditPipeline (Qwen-Image-Edit, diffusers 58eb52c0): its own prompt_template_encode,
// copied here from pipeline_qwenimage_edit.py, with the one image's bare vision block; the same
// 64 tokens dropped.
TEST(QwenEditPromptTest, QwenImageEditPipelinesTemplateHasABareVisionBlock) {
  const std::string edit_template =
      "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
      "texture, objects, background), then explain how the user's text instruction should alter or "
      "modify the image. Generate a new image that meets the user's requirements while maintaining "
      "consistency with the original input where appropriate.<|im_end|>\n<|im_start|>user\n"
      "<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n";
  const size_t at = edit_template.find("{}");
  const std::string formatted =
      edit_template.substr(0, at) + "make it red" + edit_template.substr(at + 2);
  EXPECT_EQ(QwenEditTemplatedPrompt("make it red", 1, QwenEditImageLabels::kBare), formatted);
  EXPECT_EQ(QwenEditImagePrompt(1, QwenEditImageLabels::kBare),
            "<|vision_start|><|image_pad|><|vision_end|>");
  auto tokens = TokenizeQwenEditPrompts(Tokenizer(), {"make it red"}, {{1, 4, 4}}, 2,
                                        QwenEditImageLabels::kBare);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  auto numbered = TokenizeQwenEditPrompts(Tokenizer(), {"make it red"}, {{1, 4, 4}}, 2);
  ASSERT_TRUE(numbered.ok()) << numbered.status();
  EXPECT_LT(tokens->length, numbered->length);  // no "Picture 1: "
  EXPECT_EQ(std::count(tokens->input_ids.begin(), tokens->input_ids.end(), Id("<|image_pad|>")), 4);
}

TEST(QwenEditPromptTest, ImageTokenCountsInOrder) {
  auto counts = QwenEditImageTokenCounts({{1, 28, 20}, {1, 16, 16}, {1, 2, 2}}, 2);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::vector<int64_t>{140, 64, 1}));
  EXPECT_FALSE(QwenEditImageTokenCounts({{1, 3, 2}}, 2).ok());
  EXPECT_FALSE(QwenEditImageTokenCounts({{0, 4, 4}}, 2).ok());
  EXPECT_FALSE(QwenEditImageTokenCounts({{1, 4, 4}}, 0).ok());
}

TEST(QwenEditPromptTest, PadsExpandInOrderAcrossTheBatch) {
  const std::string pad = "<|image_pad|>";
  auto out = ExpandQwenImagePads({"a" + pad + "b" + pad, "c" + pad}, {2, 3, 1});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0], "a" + Repeat(pad, 2) + "b" + Repeat(pad, 3));
  EXPECT_EQ((*out)[1], "c" + pad);
  // Left-over counts are ignored; too few fail (transformers' StopIteration).
  EXPECT_TRUE(ExpandQwenImagePads({"x" + pad}, {1, 5}).ok());
  EXPECT_FALSE(ExpandQwenImagePads({pad + pad}, {1}).ok());
  auto none = ExpandQwenImagePads({"plain"}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)[0], "plain");
}

TEST(QwenEditPromptTest, TokenizedImagesSitInTheirPictures) {
  const std::vector<std::array<int64_t, 3>> grids = {{1, 28, 20}, {1, 8, 12}};
  auto tokens = TokenizeQwenEditPrompts(Tokenizer(), {"swap the two cats"}, grids, 2);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->batch, 1);
  ASSERT_EQ(static_cast<int64_t>(tokens->input_ids.size()), tokens->length);
  EXPECT_TRUE(std::all_of(tokens->attention_mask.begin(), tokens->attention_mask.end(),
                          [](int64_t m) { return m == 1; }));
  const std::vector<int64_t>& ids = tokens->input_ids;
  const int64_t start = Id("<|vision_start|>"), pad = Id("<|image_pad|>"),
                end = Id("<|vision_end|>");
  EXPECT_EQ(ids.front(), Id("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), pad), 140 + 24);
  // Each picture: <|vision_start|>, its pads, <|vision_end|>, in image order.
  const std::vector<int64_t> expected_pads = {140, 24};
  size_t pos = 0;
  for (int64_t n : expected_pads) {
    pos = std::find(ids.begin() + pos, ids.end(), start) - ids.begin();
    ASSERT_LT(pos + n + 1, ids.size());
    for (int64_t k = 1; k <= n; ++k) ASSERT_EQ(ids[pos + k], pad) << "pad " << k;
    EXPECT_EQ(ids[pos + n + 1], end);
    pos += n + 2;
  }
  // The whole row is the tokenizer's ids of the expanded text.
  const std::string expanded =
      std::string(kSystem) + "Picture 1: <|vision_start|>" + Repeat("<|image_pad|>", 140) +
      "<|vision_end|>Picture 2: <|vision_start|>" + Repeat("<|image_pad|>", 24) +
      "<|vision_end|>swap the two cats" + kTail;
  auto direct = Tokenizer().Encode(expanded);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(ids, direct->ids);
}

TEST(QwenEditPromptTest, BatchPadsOnTheRightToTheLongest) {
  const std::vector<std::string> prompts = {"red", "a much longer instruction than the first"};
  auto tokens = TokenizeQwenEditPrompts(Tokenizer(), prompts, {}, 2);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->batch, 2);
  std::vector<std::vector<int64_t>> rows;
  for (const auto& p : prompts) {
    auto enc = Tokenizer().Encode(QwenEditTemplatedPrompt(p, 0));
    ASSERT_TRUE(enc.ok()) << enc.status();
    rows.push_back(enc->ids);
  }
  ASSERT_LT(rows[0].size(), rows[1].size());
  const int64_t len = static_cast<int64_t>(rows[1].size());
  ASSERT_EQ(tokens->length, len);
  ASSERT_EQ(tokens->input_ids.size(), static_cast<size_t>(2 * len));
  ASSERT_EQ(tokens->attention_mask.size(), static_cast<size_t>(2 * len));
  const int64_t pad_id = *Tokenizer().pad_id();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < len; ++t) {
      const bool real = t < static_cast<int64_t>(rows[b].size());
      EXPECT_EQ(tokens->input_ids[b * len + t], real ? rows[b][t] : pad_id) << b << "," << t;
      EXPECT_EQ(tokens->attention_mask[b * len + t], real ? 1 : 0) << b << "," << t;
    }
  }
}

TEST(QwenEditPromptTest, RefusesWhatTheProcessorCannotDo) {
  EXPECT_FALSE(TokenizeQwenEditPrompts(Tokenizer(), {}, {}, 2).ok());
  // Two prompts share one iterator of replacements: B * N pads, N replacements.
  EXPECT_FALSE(TokenizeQwenEditPrompts(Tokenizer(), {"a", "b"}, {{1, 4, 4}}, 2).ok());
  // A prompt's own <|image_pad|> takes a replacement too.
  EXPECT_FALSE(TokenizeQwenEditPrompts(Tokenizer(), {"<|image_pad|>"}, {{1, 4, 4}}, 2).ok());
  EXPECT_FALSE(TokenizeQwenEditPrompts(Tokenizer(), {"x"}, {{1, 3, 3}}, 2).ok());
}

}  // namespace
}  // namespace ditserve::pipeline
