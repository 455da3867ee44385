// Our SentencePiece reader, normaliser and unigram encoder give exactly libsentencepiece's ids, on
// the reference prompts and on a corpus of awkward text (whitespace, Unicode normalisation, unknown
// characters, malformed UTF-8, long random strings). This binary links libsentencepiece, so it must
// not load libprotobuf: no LibTorch, no gRPC (see tokenizer_spm_oracle.h).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizers/t5_tokenizer.h"
#include "tests/unit/tokenizer_spm_oracle.h"

namespace ditserve::tokenizers {
namespace {

std::string FixturesDir() {
  if (const char* env = std::getenv("DITSERVE_FIXTURES_DIR"); env && *env) return env;
  return DITSERVE_FIXTURES_DIR;
}

std::string T5Dir() { return FixturesDir() + "/flux1-tiny/tokenizer_2"; }

std::vector<int64_t> OracleIds(const testing::SentencePieceModel& oracle, const std::string& text) {
  const std::vector<int> ids = oracle.EncodeAsIds(text);
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::vector<std::string> Corpus() {
  std::vector<std::string> corpus = {
      "", " ", "   a   b   ", "\t\n\r a\tcat \n", "a cat holding a sign that says hello",
      "A photograph of an astronaut riding a horse, 4k!!",
      "naïve café crème brûlée — 東京 🍣", "nai\u0308ve cafe\u0301",  // decomposed
      "\uff21\uff22\uff23 \uff11\uff12\uff13",                       // full-width
      "\u3000a\u00a0b\u2002c\u200bd\u2028e", "\u00bd \u2460 \ufb01 \u2122 \u00c5\u212b",
      "x\u0000y\u0001z\u007f", "\xff\xfe bad \xc3 utf8 \xe2\x82", "\xed\xa0\x80 surrogate",
      "ÀÉÎÕÜ àéîõü ÇçÑñ ß ẞ", "Ελληνικά Русский עברית العربية हिन्दी",
      "tabs\tand\nnewlines\r\nand\x0bvertical", "emoji 👩‍👩‍👧 🇫🇷 ✌🏽", "....,,,;;;!!!???",
      "\u2581 already escaped \u2581\u2581", "unk\u0378\u0379 chars",
  };
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {
      "a", "b", "e", "s", "t", " ", "  ", "\t", "\n", ".", ",", "!", "é", "e\u0301", "ß", "東",
      "🍣", "\u3000", "\uff41", "\u00a0", "0", "9", "\xff", "sun", "flower", "field", "\u2581"};
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
    corpus.push_back(text);
  }
  return corpus;
}

TEST(SpmCrossCheck, OurEncoderEqualsLibsentencepiece) {
  std::string error;
  auto oracle = testing::SentencePieceModel::Load(T5Dir() + "/spiece.model", &error);
  ASSERT_NE(oracle, nullptr) << error;
  auto ours = T5Tokenizer::Load(T5Dir());
  ASSERT_TRUE(ours.ok()) << ours.status();
  int compared = 0;
  for (const std::string& text : Corpus()) {
    EXPECT_EQ(ours->Tokenize(text), OracleIds(*oracle, text)) << "text: \"" << text << "\"";
    ++compared;
  }
  std::ifstream in(FixturesDir() + "/prompts.json");
  const nlohmann::json prompts = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(prompts.is_array());
  for (const auto& prompt : prompts) {
    const std::string text = prompt.get<std::string>();
    EXPECT_EQ(ours->Tokenize(text), OracleIds(*oracle, text)) << text;
    ++compared;
  }
  EXPECT_GT(compared, 300);
  EXPECT_EQ(static_cast<int64_t>(oracle->eos_id()), ours->eos_id());
  EXPECT_EQ(static_cast<int64_t>(oracle->pad_id()), ours->pad_id());
  EXPECT_EQ(static_cast<int64_t>(oracle->unk_id()), ours->unk_id());
}

}  // namespace
}  // namespace ditserve::tokenizers
