// T5 tokenizer behaviour beyond the reference prompts: whitespace and Unicode normalisation,
// special tokens in text, truncation and padding, corrupt files, concurrency.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizers/t5_tokenizer.h"
#include "tests/support/timing.h"
#include "tests/support/tokenizer_fixtures.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;
using ::ditserve::testing::Concat;
using ::ditserve::testing::ExpectConcurrentEncodesAgree;
using ::ditserve::testing::ExpectCorruptFilesRejected;
using ::ditserve::testing::ReadTokenizerFile;
using ::ditserve::testing::T5TokenizerDir;

const T5Tokenizer& T5() { return ::ditserve::testing::FixtureT5Tokenizer(); }

TEST(T5Tokenizer, SpecialIdsAndSizes) {
  EXPECT_EQ(T5().eos_id(), 1);
  EXPECT_EQ(T5().pad_id(), 0);
  EXPECT_EQ(T5().unk_id(), 2);
  EXPECT_EQ(T5().vocab_size(), 250u);  // 150 pieces + 100 <extra_id_N>
  EXPECT_EQ(T5().model_max_length(), 512);
}

TEST(T5Tokenizer, EmptyAndWhitespaceOnlyPromptsAreJustEnd) {
  EXPECT_EQ(T5().EncodeUnpadded(""), (std::vector<int64_t>{1}));
  EXPECT_EQ(T5().EncodeUnpadded("  \t \n "), (std::vector<int64_t>{1}));
  std::vector<int64_t> padded(32, 0);
  padded[0] = 1;
  EXPECT_EQ(T5().Encode("", 32, /*pad=*/true), padded);
}

TEST(T5Tokenizer, ExtraWhitespaceIsRemoved) {
  const auto plain = T5().Tokenize("a cat holding a sign");
  EXPECT_FALSE(plain.empty());
  EXPECT_EQ(T5().Tokenize("  a   cat\tholding\n a sign  "), plain);
}

TEST(T5Tokenizer, UnicodeIsNfkcNormalised) {
  // Full-width Latin letters and the ideographic space fold to ASCII (nmt_nfkc charsmap).
  EXPECT_EQ(T5().Tokenize("\uff43\uff41\uff54\u3000\uff53\uff49\uff47\uff4e"),
            T5().Tokenize("cat sign"));
  // Characters the tiny vocabulary lacks become <unk>; a run of them is one <unk>.
  const auto ids = T5().Tokenize("\u6771\u4eac");
  EXPECT_NE(std::find(ids.begin(), ids.end(), T5().unk_id()), ids.end());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), T5().unk_id()), 1);
}

TEST(T5Tokenizer, SpecialTokensInTextBecomeTheirIds) {
  EXPECT_EQ(T5().Tokenize("a cat</s>"), Concat({T5().Tokenize("a cat"), {1}}));
  EXPECT_EQ(T5().Tokenize("<pad>a"), Concat({{0}, T5().Tokenize("a")}));
  // <extra_id_0> is the last id, <extra_id_99> the first after the 150 pieces.
  EXPECT_EQ(T5().Tokenize("<extra_id_0>"), (std::vector<int64_t>{249}));
  EXPECT_EQ(T5().Tokenize("<extra_id_99>"), (std::vector<int64_t>{150}));
  // Text after a special token gets its own word-initial "▁", as in the reference ("always").
  EXPECT_EQ(T5().Tokenize("sign</s>cat"),
            Concat({T5().Tokenize("sign"), {1}, T5().Tokenize("cat")}));
}

TEST(T5Tokenizer, TruncationKeepsEndAndPaddingFillsMaxLength) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += "sunflowers in a field ";
  const auto unpadded = T5().EncodeUnpadded(text);
  ASSERT_GT(unpadded.size(), 64u);
  for (int max_length : {1, 2, 5, 32, 64}) {
    for (bool pad : {false, true}) {
      const auto ids = T5().Encode(text, max_length, pad);
      ASSERT_EQ(ids.size(), static_cast<size_t>(max_length));
      EXPECT_EQ(ids.back(), T5().eos_id());
      EXPECT_TRUE(std::equal(ids.begin(), ids.end() - 1, unpadded.begin()));
    }
  }
  const auto short_ids = T5().Encode("a cat", 16, /*pad=*/false);
  EXPECT_EQ(short_ids, T5().EncodeUnpadded("a cat"));
  const auto padded = T5().Encode("a cat", 16, /*pad=*/true);
  ASSERT_EQ(padded.size(), 16u);
  for (size_t i = short_ids.size(); i < 16; ++i) EXPECT_EQ(padded[i], T5().pad_id());
  EXPECT_EQ(T5().Encode(text, 0, true), (std::vector<int64_t>{1}));  // below 1 is treated as 1
}

TEST(T5Tokenizer, MissingModelIsNotFoundAndNamed) {
  auto missing = T5Tokenizer::Load("/nonexistent/tokenizer_2");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("spiece.model"), absl::string_view::npos);
}

TEST(T5Tokenizer, CorruptFilesAreRejectedWithTheirName) {
  const std::string model = ReadTokenizerFile(fs::path(T5TokenizerDir()) / "spiece.model");
  nlohmann::json json =
      nlohmann::json::parse(ReadTokenizerFile(fs::path(T5TokenizerDir()) / "tokenizer.json"));
  nlohmann::json other_vocab = json;
  other_vocab["model"]["vocab"][7][0] = "\u2581different";
  nlohmann::json first_only = json;
  first_only["pre_tokenizer"]["pretokenizers"][1]["prepend_scheme"] = "first";
  ExpectCorruptFilesRejected<T5Tokenizer>(T5TokenizerDir(), "t5_corrupt_case", {
      {"spiece.model", "garbage", "spiece.model"},
      {"spiece.model", model.substr(0, model.size() / 3), "spiece.model"},
      {"tokenizer.json", "{\"added_tokens\": 5}", "tokenizer.json"},
      {"tokenizer.json", "{broken", "tokenizer.json"},
      {"tokenizer.json", other_vocab.dump(), "differs from"},
      {"tokenizer.json", first_only.dump(), "prepend_scheme"},
      {"tokenizer_config.json", "[]", "tokenizer_config.json"},
  });
}

TEST(T5Tokenizer, ConcurrentEncodesAgreeWithSerialOnes) {
  const auto encode = [](const std::string& t) { return T5().Encode(t, 32, true); };
  ExpectConcurrentEncodesAgree(encode, encode);
}

TEST(T5Tokenizer, TimingOfA512TokenEncode) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "sunflowers in a field ";
  const auto ids = T5().Encode(text, 512, /*pad=*/true);
  ASSERT_EQ(ids.size(), 512u);
  const int kRounds = 500;
  size_t sink = 0;
  const auto ms = ::ditserve::testing::MeanMillis(kRounds, [&] {
    sink += T5().Encode(text, 512, /*pad=*/true).size();
    return absl::OkStatus();
  });
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_EQ(sink, 512u * kRounds);
  std::printf("T5 Encode of a %zu-token prompt padded to 512: %.1f us\n",
              T5().EncodeUnpadded(text).size(), *ms * 1000);
}

}  // namespace
}  // namespace ditserve::tokenizers
