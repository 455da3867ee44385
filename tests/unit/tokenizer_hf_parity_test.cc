// HfTokenizer (tokenizer.json byte-level BPE, PCRE2 Split) and the slow Qwen2 format against the
// real libraries' ids: fixtures/tokenizer_corpus.json (transformers 5 / tokenizers, FLUX.2's
// Mistral tokenizer with <s>, Qwen-Image's Qwen2 tokenizer from tokenizer.json and from
// vocab.json + merges.txt) and the CLIP tokenizer.json of flux1-tiny against clip.ids.N.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "sharding/safetensors.h"
#include "tests/support/tokenizer_fixtures.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;
using ::ditserve::testing::FixturePath;

// A fixture JSON file; a missing or unreadable one fails the test loudly (never a silent skip).
nlohmann::json ReadFixtureJson(const std::string& relative) {
  const std::string path = FixturePath(relative);
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "fixture missing: " << path
                  << " (generate it with tests/fixtures/make_fixtures.py; set "
                     "DITSERVE_FIXTURES_DIR to the folder that has it)";
    return nlohmann::json();
  }
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) ADD_FAILURE() << path << " is not valid JSON";
  return json;
}

struct Corpus {
  std::vector<std::string> texts;
  std::vector<std::vector<int64_t>> ids;
};

Corpus ReadCorpus(const char* key) {
  const nlohmann::json json = ReadFixtureJson("tokenizer_corpus.json");
  Corpus corpus;
  if (!json.is_object() || !json.contains("corpus") || !json.contains(key)) {
    ADD_FAILURE() << "tokenizer_corpus.json lacks \"corpus\" or \"" << key << "\"";
    return corpus;
  }
  corpus.texts = json["corpus"].get<std::vector<std::string>>();
  corpus.ids = json[key].get<std::vector<std::vector<int64_t>>>();
  EXPECT_EQ(corpus.texts.size(), corpus.ids.size()) << key;
  EXPECT_GE(corpus.texts.size(), 40u) << key;
  return corpus;
}

HfTokenizer LoadOrFail(const std::string& dir) {
  auto loaded = LoadHfTokenizer(dir);
  if (!loaded.ok()) {
    ADD_FAILURE() << loaded.status();
    std::abort();
  }
  return std::move(*loaded);
}

void ExpectCorpusParity(const HfTokenizer& tokenizer, const char* key) {
  const Corpus corpus = ReadCorpus(key);
  for (size_t i = 0; i < corpus.texts.size() && i < corpus.ids.size(); ++i) {
    auto encoded = tokenizer.Encode(corpus.texts[i]);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(encoded->ids, corpus.ids[i]) << key << " text " << i << ": \"" << corpus.texts[i]
                                           << "\"";
    EXPECT_EQ(encoded->attention_mask, std::vector<int64_t>(corpus.ids[i].size(), 1));
  }
}

std::string Flux2Dir() { return FixturePath("flux2-tiny/tokenizer"); }
std::string QwenDir() { return FixturePath("qwenimage-tiny/tokenizer"); }

TEST(HfTokenizerParity, Flux2MistralTokenizerJsonEqualsTransformers) {
  const HfTokenizer tokenizer = LoadOrFail(Flux2Dir());
  EXPECT_EQ(tokenizer.num_special_tokens_to_add(), 1u);  // <s>
  ExpectCorpusParity(tokenizer, "flux2");
}

TEST(HfTokenizerParity, QwenImageTokenizerJsonEqualsTransformers) {
  ExpectCorpusParity(LoadOrFail(QwenDir()), "qwenimage");
}

TEST(HfTokenizerParity, QwenImageSlowFilesEqualTransformers) {
  const fs::path copy = ::ditserve::testing::CopyToTempDir(QwenDir(), "hf_qwen_slow");
  ASSERT_TRUE(fs::remove(copy / "tokenizer.json")) << "the fixture folder has no tokenizer.json";
  ASSERT_TRUE(fs::exists(copy / "vocab.json") && fs::exists(copy / "merges.txt"));
  const HfTokenizer tokenizer = LoadOrFail(copy.string());
  EXPECT_NE(tokenizer.source().find("merges.txt"), std::string::npos) << tokenizer.source();
  ExpectCorpusParity(tokenizer, "qwenimage_slow");
}

// Truncation and padding, checked against the corpus ids: truncation keeps the first ids (the
// <s> the template adds included), padding puts the pad token (tokenizer_config.json's <pad>)
// on the side asked for, with attention mask 0 there.
TEST(HfTokenizerParity, Flux2TruncationAndPaddingAroundCorpusIds) {
  const HfTokenizer tokenizer = LoadOrFail(Flux2Dir());
  ASSERT_TRUE(tokenizer.pad_id().has_value());
  EXPECT_EQ(tokenizer.pad_id(), tokenizer.TokenToId("<pad>"));
  EXPECT_EQ(tokenizer.bos_id(), tokenizer.TokenToId("<s>"));
  const Corpus corpus = ReadCorpus("flux2");
  int checked = 0;
  for (size_t i = 0; i < corpus.texts.size() && i < corpus.ids.size(); ++i) {
    const std::vector<int64_t>& full = corpus.ids[i];
    if (full.size() < 6) continue;
    ++checked;
    HfEncodeOptions cut;
    cut.truncation = true;
    cut.max_length = 5;
    auto truncated = tokenizer.Encode(corpus.texts[i], cut);
    ASSERT_TRUE(truncated.ok()) << truncated.status();
    EXPECT_EQ(truncated->ids, std::vector<int64_t>(full.begin(), full.begin() + 5)) << i;

    HfEncodeOptions pad;
    pad.max_length = static_cast<int>(full.size()) + 3;
    pad.pad_to_max_length = true;
    pad.truncation = true;
    pad.padding_side = Side::kLeft;
    auto left = tokenizer.Encode(corpus.texts[i], pad);
    ASSERT_TRUE(left.ok()) << left.status();
    std::vector<int64_t> expected(3, *tokenizer.pad_id());
    expected.insert(expected.end(), full.begin(), full.end());
    EXPECT_EQ(left->ids, expected) << i;
    std::vector<int64_t> mask(3, 0);
    mask.resize(expected.size(), 1);
    EXPECT_EQ(left->attention_mask, mask) << i;

    pad.padding_side = Side::kRight;
    auto right = tokenizer.Encode(corpus.texts[i], pad);
    ASSERT_TRUE(right.ok()) << right.status();
    expected = full;
    expected.resize(full.size() + 3, *tokenizer.pad_id());
    EXPECT_EQ(right->ids, expected) << i;

    HfEncodeOptions plain;
    plain.add_special_tokens = false;
    auto no_bos = tokenizer.Encode(corpus.texts[i], plain);
    ASSERT_TRUE(no_bos.ok());
    EXPECT_EQ(no_bos->ids, std::vector<int64_t>(full.begin() + 1, full.end())) << i;
  }
  EXPECT_GE(checked, 10);
}

TEST(HfTokenizerParity, QwenSpecialTokensFromTokenizerConfig) {
  const HfTokenizer tokenizer = LoadOrFail(QwenDir());
  EXPECT_EQ(tokenizer.num_special_tokens_to_add(), 0u);
  EXPECT_EQ(tokenizer.pad_id(), tokenizer.TokenToId("<|endoftext|>"));
  EXPECT_EQ(tokenizer.eos_id(), tokenizer.TokenToId("<|im_end|>"));
  EXPECT_FALSE(tokenizer.bos_id().has_value());
  EXPECT_EQ(tokenizer.model_max_length(), 131072);
}

std::vector<std::string> Prompts() {
  const nlohmann::json json = ReadFixtureJson("prompts.json");
  if (!json.is_array()) return {};
  return json.get<std::vector<std::string>>();
}

// The CLIP tokenizer.json (NFC + Replace + Lowercase normalizer, inverted Split, ByteLevel with
// GPT-2's regex, "</w>" suffix, RobertaProcessing) through the generic reader, padded to 77.
TEST(HfTokenizerParity, ClipTokenizerJsonEqualsClipIds) {
  const HfTokenizer tokenizer = LoadOrFail(::ditserve::testing::ClipTokenizerDir());
  EXPECT_EQ(tokenizer.num_special_tokens_to_add(), 2u);
  auto reference = sharding::SafetensorsFile::Open(FixturePath("reference.safetensors"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const auto prompts = Prompts();
  ASSERT_FALSE(prompts.empty());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto info = (*reference)->Find("clip.ids." + std::to_string(i));
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_EQ((*info)->dtype, sharding::DType::kI64);
    const auto* data = reinterpret_cast<const int64_t*>((*reference)->Data(**info));
    const std::vector<int64_t> expected(data, data + (*info)->numel());
    HfEncodeOptions options;
    options.max_length = 77;
    options.truncation = true;
    options.pad_to_max_length = true;
    auto encoded = tokenizer.Encode(prompts[i], options);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(encoded->ids, expected) << "prompt " << i << ": " << prompts[i];
  }
}

TEST(HfTokenizerParity, ConcurrentEncodesAgree) {
  const HfTokenizer tokenizer = LoadOrFail(QwenDir());
  auto encode = [&](const std::string& text) {
    auto encoded = tokenizer.Encode(text);
    return encoded.ok() ? encoded->ids : std::vector<int64_t>{-1};
  };
  ::ditserve::testing::ExpectConcurrentEncodesAgree(encode, encode);
}

}  // namespace
}  // namespace ditserve::tokenizers
