// CLIP tokenizer behaviour beyond the reference prompts: normalisation, pre-tokenisation, special
// tokens, truncation and padding, corrupt files, concurrency, speed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "models/tokenizers/clip_tokenizer.h"
#include "tests/support/timing.h"
#include "tests/support/tokenizer_fixtures.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;
using ::ditserve::testing::ClipTokenizerDir;
using ::ditserve::testing::Concat;
using ::ditserve::testing::CopyToTempDir;
using ::ditserve::testing::ExpectConcurrentEncodesAgree;
using ::ditserve::testing::ExpectCorruptFilesRejected;
using ::ditserve::testing::ReadTokenizerFile;

const ClipTokenizer& Clip() { return ::ditserve::testing::FixtureClipTokenizer(); }

int64_t Id(const std::string& token) {
  auto id = Clip().TokenToId(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(ClipTokenizer, SpecialIdsComeFromConfigAndVocab) {
  EXPECT_EQ(Clip().bos_id(), Id("<|startoftext|>"));
  EXPECT_EQ(Clip().eos_id(), Id("<|endoftext|>"));
  EXPECT_EQ(Clip().pad_id(), Clip().eos_id());
  EXPECT_EQ(Clip().model_max_length(), 77);
}

TEST(ClipTokenizer, EmptyAndWhitespaceOnlyPromptsAreStartEndPadding) {
  std::vector<int64_t> expected(77, Clip().pad_id());
  expected[0] = Clip().bos_id();
  expected[1] = Clip().eos_id();
  EXPECT_EQ(Clip().Encode("", 77), expected);
  EXPECT_EQ(Clip().Encode(" \t\n\r\v\f ", 77), expected);
  EXPECT_EQ(Clip().Encode("\u3000\u00a0\u2028", 77), expected);  // Unicode White_Space
  EXPECT_TRUE(Clip().Tokenize("").empty());
}

TEST(ClipTokenizer, WhitespaceRunsAndCaseDoNotMatter) {
  const auto plain = Clip().Tokenize("a cat holding a sign");
  EXPECT_FALSE(plain.empty());
  EXPECT_EQ(Clip().Tokenize("  A   CAT\tHolding\n\na  sign \u3000"), plain);
  EXPECT_EQ(Clip().Tokenize("a\u00a0cat\u2003holding a sign"), plain);
}

TEST(ClipTokenizer, WordsAreBpeWithEndOfWordSuffix) {
  // A single-letter word is its "</w>" form; a run of punctuation is one word.
  EXPECT_EQ(Clip().Tokenize("a"), (std::vector<int64_t>{Id("a</w>")}));
  EXPECT_EQ(Clip().Tokenize("!!"), (std::vector<int64_t>{Id("!"), Id("!</w>")}));
  EXPECT_NE(Clip().Tokenize("!!"), Concat({Clip().Tokenize("!"), Clip().Tokenize("!")}));
}

TEST(ClipTokenizer, PreTokenisationSplitsDigitsContractionsAndPunctuation) {
  EXPECT_EQ(Clip().Tokenize("2024"), Concat({Clip().Tokenize("2"), Clip().Tokenize("0"),
                                             Clip().Tokenize("2"), Clip().Tokenize("4")}));
  EXPECT_EQ(Clip().Tokenize("it's"), Concat({Clip().Tokenize("it"), Clip().Tokenize("'s")}));
  EXPECT_EQ(Clip().Tokenize("4k!!"),
            Concat({Clip().Tokenize("4"), Clip().Tokenize("k"), Clip().Tokenize("!!")}));
  EXPECT_EQ(Clip().Tokenize("cat,dog"),
            Concat({Clip().Tokenize("cat"), Clip().Tokenize(","), Clip().Tokenize("dog")}));
}

TEST(ClipTokenizer, UnicodeIsNfcComposedThenLowerCasedThenByteLevel) {
  // Decomposed e + U+0301 composes to é before tokenising.
  EXPECT_EQ(Clip().Tokenize("cafe\u0301"), Clip().Tokenize("caf\u00e9"));
  EXPECT_EQ(Clip().Tokenize("CAF\u00c9"), Clip().Tokenize("caf\u00e9"));
  // Per-character full lower-casing: no final-sigma rule, İ becomes i + U+0307.
  EXPECT_EQ(Clip().Tokenize("\u03a3\u0391\u03a3"), Clip().Tokenize("\u03c3\u03b1\u03c3"));
  EXPECT_EQ(Clip().Tokenize("\u0130"), Clip().Tokenize("i\u0307"));
  // A 4-byte emoji that the tiny vocabulary has no merge for: one id per byte, the last with </w>.
  const auto emoji = Clip().Tokenize("\U0001F363");
  ASSERT_EQ(emoji.size(), 4u);
  // U+1F363 is F0 9F 8D A3: 0xF0 and 0xA3 stand for themselves, 0x9F and 0x8D are remapped.
  EXPECT_EQ(emoji, (std::vector<int64_t>{Id("\u00f0"), Id("\u0141"), Id("\u012f"),
                                         Id("\u00a3</w>")}));
}

TEST(ClipTokenizer, SpecialTokensInTextAreMatchedRawAndCaseSensitively) {
  const int64_t bos = Clip().bos_id();
  const int64_t eos = Clip().eos_id();
  EXPECT_EQ(Clip().Tokenize("<|endoftext|>"), (std::vector<int64_t>{eos}));
  EXPECT_EQ(Clip().Tokenize("a<|startoftext|>cat"),
            Concat({Clip().Tokenize("a"), {bos}, Clip().Tokenize("cat")}));
  // Typed in other case it is ordinary text: lower-cased, then split into "<|", letters, "|>".
  const auto typed = Clip().Tokenize("<|EndOfText|>");
  EXPECT_EQ(typed, Concat({Clip().Tokenize("<|"), Clip().Tokenize("endoftext"),
                           Clip().Tokenize("|>")}));
  for (int64_t id : typed) EXPECT_NE(id, eos);
}

TEST(ClipTokenizer, TruncationKeepsTheEndTokenAndPaddingFillsMaxLength) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "a cat ";
  const auto unpadded = Clip().EncodeUnpadded(text);
  ASSERT_EQ(unpadded.size(), 82u);  // 80 tokens + start + end
  for (int max_length : {2, 3, 10, 77, 82}) {
    const auto ids = Clip().Encode(text, max_length);
    ASSERT_EQ(ids.size(), static_cast<size_t>(max_length));
    EXPECT_EQ(ids.front(), Clip().bos_id());
    EXPECT_EQ(ids.back(), Clip().eos_id());
    EXPECT_TRUE(std::equal(ids.begin(), ids.end() - 1, unpadded.begin())) << max_length;
  }
  EXPECT_EQ(Clip().Encode(text, 0).size(), 2u);  // below 2 is treated as 2
  const auto padded = Clip().Encode("a cat", 100);
  ASSERT_EQ(padded.size(), 100u);
  EXPECT_EQ(std::vector<int64_t>(padded.begin(), padded.begin() + 4), Clip().EncodeUnpadded("a cat"));
  for (size_t i = 4; i < padded.size(); ++i) EXPECT_EQ(padded[i], Clip().pad_id());
}

TEST(ClipTokenizer, InvalidUtf8DoesNotCrash) {
  const std::string bad = std::string("a\xff\xfe cat \xc3", 8);
  const auto ids = Clip().Encode(bad, 77);
  EXPECT_EQ(ids.size(), 77u);
}

TEST(ClipTokenizer, MissingFilesAreNamed) {
  auto missing = ClipTokenizer::Load("/nonexistent/tokenizer");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("vocab.json"), absl::string_view::npos);

  const fs::path dir = CopyToTempDir(ClipTokenizerDir(), "clip_no_merges");
  fs::remove(dir / "merges.txt");
  auto no_merges = ClipTokenizer::Load(dir.string());
  ASSERT_FALSE(no_merges.ok());
  EXPECT_NE(no_merges.status().message().find("merges.txt"), absl::string_view::npos);
}

TEST(ClipTokenizer, CorruptFilesAreRejectedWithTheirName) {
  const fs::path dir = CopyToTempDir(ClipTokenizerDir(), "clip_corrupt");
  const std::string good_vocab = ReadTokenizerFile(dir / "vocab.json");
  ExpectCorruptFilesRejected<ClipTokenizer>(ClipTokenizerDir(), "clip_corrupt_case", {
      {"vocab.json", good_vocab.substr(0, good_vocab.size() / 2), "vocab.json"},
      {"vocab.json", "[1, 2, 3]", "vocab.json"},
      {"vocab.json", "{\"a\": \"x\"}", "vocab.json"},
      {"vocab.json", "{\"a\": 0}", "vocab.json"},  // no <|endoftext|> (the unknown token)
      {"merges.txt", "#version: 0.2\ni n\nthis line has three\n", "merges.txt:3"},
      {"merges.txt", "#version: 0.2\nzz qq\n", "merges.txt:2"},  // tokens not in the vocab
      {"tokenizer_config.json", "{not json", "tokenizer_config.json"},
      {"tokenizer_config.json", "{\"bos_token\": \"<|nope|>\"}", "<|nope|>"},
  });
}

TEST(ClipTokenizer, ConcurrentEncodesAgreeWithSerialOnes) {
  // A fresh tokenizer, so the threads also race on filling the word cache.
  auto fresh = ClipTokenizer::Load(ClipTokenizerDir());
  ASSERT_TRUE(fresh.ok());
  ExpectConcurrentEncodesAgree([](const std::string& t) { return Clip().Encode(t, 77); },
                               [&](const std::string& t) { return fresh->Encode(t, 77); });
}

TEST(ClipTokenizer, TimingOfA77TokenPrompt) {
  // 19 x "a photograph of a" -> 76 tokens, cut to 75 + start + end = 77, no padding.
  std::string text;
  for (int i = 0; i < 19; ++i) text += "a photograph of a ";
  auto fresh = ClipTokenizer::Load(ClipTokenizerDir());
  ASSERT_TRUE(fresh.ok());
  const auto ids = fresh->Encode(text, 77);
  EXPECT_NE(ids[75], fresh->pad_id());
  const int kRounds = 2000;
  size_t sink = 0;
  const auto ms = ::ditserve::testing::MeanMillis(kRounds, [&] {
    sink += fresh->Encode(text, 77).size();
    return absl::OkStatus();
  });
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_EQ(sink, 77u * kRounds);
  std::printf("CLIP Encode of a 77-token prompt: %.1f us (word cache warm)\n", *ms * 1000);
}

}  // namespace
}  // namespace ditserve::tokenizers
