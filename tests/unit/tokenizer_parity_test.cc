// CLIP and T5 tokenizer ids equal transformers' for every prompt of fixtures/prompts.json
// (reference tensors clip.ids.N, t5.ids.N, t5.ids_unpadded.N).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizers/clip_tokenizer.h"
#include "models/tokenizers/t5_tokenizer.h"
#include "tests/support/fixtures.h"

namespace ditserve::tokenizers {
namespace {

using ::ditserve::testing::FixturesDir;
using ::ditserve::testing::Ref;

std::vector<std::string> Prompts() {
  std::ifstream in(FixturesDir() + "/prompts.json");
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> prompts;
  if (!json.is_array()) {
    ADD_FAILURE() << "prompts.json is not an array";
    return prompts;
  }
  for (const auto& p : json) prompts.push_back(p.get<std::string>());
  return prompts;
}

std::vector<int64_t> RefIds(const std::string& name) {
  torch::Tensor t = Ref(name).contiguous();
  if (!t.defined()) return {};
  EXPECT_EQ(t.scalar_type(), torch::kInt64) << name;
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

std::string TokenizerDir(const char* name) { return FixturesDir() + "/flux1-tiny/" + name; }

TEST(TokenizerParity, PromptsFileHasEveryReferencedPrompt) {
  EXPECT_EQ(Prompts().size(), 5u);
}

TEST(TokenizerParity, ClipIdsEqualReferenceForEveryPrompt) {
  auto tokenizer = ClipTokenizer::Load(TokenizerDir("tokenizer"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->model_max_length(), 77);
  const auto prompts = Prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto expected = RefIds("clip.ids." + std::to_string(i));
    ASSERT_EQ(expected.size(), 77u);
    EXPECT_EQ(tokenizer->Encode(prompts[i], 77), expected) << "prompt " << i << ": " << prompts[i];
  }
}

void ExpectT5Parity(const T5Tokenizer& tokenizer) {
  const auto prompts = Prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto padded = RefIds("t5.ids." + std::to_string(i));
    const auto unpadded = RefIds("t5.ids_unpadded." + std::to_string(i));
    ASSERT_EQ(padded.size(), 32u);
    EXPECT_EQ(tokenizer.Encode(prompts[i], 32, /*pad=*/true), padded) << "prompt " << i;
    EXPECT_EQ(tokenizer.EncodeUnpadded(prompts[i]), unpadded) << "prompt " << i;
    // The pipeline's own call: max_sequence_length 512, padded; unpadded prefix equals reference.
    const auto full = tokenizer.Encode(prompts[i], 512, /*pad=*/true);
    ASSERT_EQ(full.size(), 512u);
    EXPECT_EQ(std::vector<int64_t>(full.begin(), full.begin() + unpadded.size()), unpadded);
    EXPECT_EQ(tokenizer.Encode(prompts[i], 512, /*pad=*/false), unpadded);
  }
}

TEST(TokenizerParity, T5IdsEqualReferenceForEveryPrompt) {
  auto tokenizer = T5Tokenizer::Load(TokenizerDir("tokenizer_2"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->model_max_length(), 512);
  EXPECT_EQ(tokenizer->eos_id(), 1);
  EXPECT_EQ(tokenizer->pad_id(), 0);
  ExpectT5Parity(*tokenizer);
}

// Without tokenizer.json the special-token table comes from tokenizer_config.json and the
// <extra_id_N> convention; the ids must not change.
TEST(TokenizerParity, T5WithoutTokenizerJsonGivesTheSameIds) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "t5_no_tokenizer_json";
  fs::create_directories(dir);
  for (const char* file : {"spiece.model", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(TokenizerDir("tokenizer_2")) / file, dir / file,
                  fs::copy_options::overwrite_existing);
  }
  auto tokenizer = T5Tokenizer::Load(dir.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto reference = T5Tokenizer::Load(TokenizerDir("tokenizer_2"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(tokenizer->vocab_size(), reference->vocab_size());
  ExpectT5Parity(*tokenizer);
  for (const char* text : {"<extra_id_0> and <extra_id_99>", "x</s>y<pad>", "<unk>"}) {
    EXPECT_EQ(tokenizer->EncodeUnpadded(text), reference->EncodeUnpadded(text)) << text;
  }
}

}  // namespace
}  // namespace ditserve::tokenizers
