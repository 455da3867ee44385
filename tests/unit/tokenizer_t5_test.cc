// T5 tokenizer behaviour beyond the reference prompts: whitespace and Unicode normalisation,
// special tokens in text, truncation and padding, corrupt files, concurrency.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizers/t5_tokenizer.h"
#include "tests/support/fixtures.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;
using ::ditserve::testing::FixturesDir;

std::string T5Dir() { return FixturesDir() + "/flux1-tiny/tokenizer_2"; }

const T5Tokenizer& T5() {
  static const T5Tokenizer* tokenizer = [] {
    auto loaded = T5Tokenizer::Load(T5Dir());
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      std::abort();
    }
    return new T5Tokenizer(std::move(*loaded));
  }();
  return *tokenizer;
}

std::vector<int64_t> Concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

fs::path CopyT5Dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(T5Dir())) {
    fs::copy_file(entry.path(), dir / entry.path().filename());
    fs::permissions(dir / entry.path().filename(), fs::perms::owner_read | fs::perms::owner_write);
  }
  return dir;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

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
  const std::string model = ReadText(fs::path(T5Dir()) / "spiece.model");
  nlohmann::json json = nlohmann::json::parse(ReadText(fs::path(T5Dir()) / "tokenizer.json"));
  nlohmann::json other_vocab = json;
  other_vocab["model"]["vocab"][7][0] = "\u2581different";
  nlohmann::json first_only = json;
  first_only["pre_tokenizer"]["pretokenizers"][1]["prepend_scheme"] = "first";
  struct Case {
    const char* file;
    std::string text;
    const char* expect_in_message;
  };
  const Case cases[] = {
      {"spiece.model", "garbage", "spiece.model"},
      {"spiece.model", model.substr(0, model.size() / 3), "spiece.model"},
      {"tokenizer.json", "{\"added_tokens\": 5}", "tokenizer.json"},
      {"tokenizer.json", "{broken", "tokenizer.json"},
      {"tokenizer.json", other_vocab.dump(), "differs from"},
      {"tokenizer.json", first_only.dump(), "prepend_scheme"},
      {"tokenizer_config.json", "[]", "tokenizer_config.json"},
  };
  for (const Case& c : cases) {
    const fs::path dir = CopyT5Dir("t5_corrupt_case");
    WriteFile(dir / c.file, c.text);
    auto loaded = T5Tokenizer::Load(dir.string());
    ASSERT_FALSE(loaded.ok()) << c.file << ": " << c.text.substr(0, 40);
    EXPECT_NE(loaded.status().message().find(c.expect_in_message), absl::string_view::npos)
        << loaded.status();
  }
}

TEST(T5Tokenizer, ConcurrentEncodesAgreeWithSerialOnes) {
  const std::vector<std::string> texts = {"a cat holding a sign", "naïve café 東京 🍣",
                                          "A photograph of an astronaut, 4k!!", ""};
  std::vector<std::vector<int64_t>> serial;
  for (const auto& t : texts) serial.push_back(T5().Encode(t, 32, true));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        const size_t i = (t + round) % texts.size();
        if (T5().Encode(texts[i], 32, true) != serial[i]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(T5Tokenizer, TimingOfA512TokenEncode) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "sunflowers in a field ";
  const auto ids = T5().Encode(text, 512, /*pad=*/true);
  ASSERT_EQ(ids.size(), 512u);
  using Clock = std::chrono::steady_clock;
  const int kRounds = 500;
  const auto start = Clock::now();
  size_t sink = 0;
  for (int i = 0; i < kRounds; ++i) sink += T5().Encode(text, 512, /*pad=*/true).size();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kRounds;
  EXPECT_EQ(sink, 512u * kRounds);
  std::printf("T5 Encode of a %zu-token prompt padded to 512: %.1f us\n",
              T5().EncodeUnpadded(text).size(), us);
}

}  // namespace
}  // namespace ditserve::tokenizers
