// HfTokenizer against the real `tokenizers` library (and transformers, for tokenizer_config.json)
// on small tokenizer.json files that exercise one feature each: Split behaviours and inversion,
// Oniguruma regex semantics (\s, \w, \h, anchors, (?i:), look-around, empty matches), the
// Mistral / Qwen / GPT-2 patterns, normalizers, added-token flags and ids, BPE options (prefix,
// suffix, unk, fuse_unk, byte_fallback, ignore_merges, duplicate merges), post-processors,
// truncation and padding. Expected ids: tests/unit/data/hf_tokenizer_cases.json, written by
// tests/unit/data/make_hf_tokenizer_cases.py with tokenizers 0.23.2 / transformers 5.17.0.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/hf_tokenizer_loader.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const Json& Cases() {
  static const Json* cases = [] {
    const std::string path =
        std::string(DITSERVE_SOURCE_DIR) + "/tests/unit/data/hf_tokenizer_cases.json";
    std::ifstream in(path);
    auto* json = new Json(Json::parse(in, nullptr, /*allow_exceptions=*/false));
    if (!in || json->is_discarded() || !json->contains("cases")) {
      ADD_FAILURE() << "cannot read " << path;
      *json = Json::object({{"cases", Json::array()}, {"vocabs", Json::array()}});
    }
    return json;
  }();
  return *cases;
}

// The case's folder: tokenizer.json with its vocabulary filled in, and tokenizer_config.json.
std::string WriteCase(const Json& c) {
  Json tokenizer = c["tokenizer"];
  const std::string ref = tokenizer["model"]["vocab"].get<std::string>();  // "@N"
  tokenizer["model"]["vocab"] = Cases()["vocabs"][std::stoul(ref.substr(1))];
  const fs::path dir = fs::path(::testing::TempDir()) / ("hf_case_" + c["name"].get<std::string>());
  (void)ditserve::RemoveTree(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << tokenizer.dump();
  if (c.contains("tokenizer_config")) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << c["tokenizer_config"].dump();
  }
  return dir.string();
}

std::string Show(const std::string& text) { return Json(text).dump(); }

HfEncodeOptions RunOptions(const Json& run) {
  HfEncodeOptions options;
  options.add_special_tokens = run.value("add_special_tokens", true);
  if (!run["truncation"].is_null()) {
    options.truncation = true;
    options.max_length = run["truncation"].get<int>();
    options.truncation_side = run.value("truncation_side", "right") == "left" ? Side::kLeft
                                                                               : Side::kRight;
  }
  if (!run["padding"].is_null()) {
    EXPECT_TRUE(!options.max_length || *options.max_length == run["padding"].get<int>())
        << "a run pads to another length than it truncates to: " << run.dump();
    options.pad_to_max_length = true;
    options.max_length = run["padding"].get<int>();
    options.padding_side = run.value("padding_side", "right") == "left" ? Side::kLeft
                                                                         : Side::kRight;
    options.pad_id = run["pad_id"].get<int64_t>();
  }
  return options;
}

void CheckCase(const Json& c) {
  const std::string name = c["name"].get<std::string>();
  SCOPED_TRACE(name);
  ASSERT_FALSE(c.contains("error") || c.contains("load_error")) << c.dump().substr(0, 300);
  auto tokenizer = LoadHfTokenizer(WriteCase(c));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto inputs = c["inputs"].get<std::vector<std::string>>();
  const auto ids = c["ids"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(inputs.size(), ids.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto encoded = tokenizer->Encode(inputs[i]);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(encoded->ids, ids[i]) << "input " << Show(inputs[i]);
  }
  if (c.contains("ids_no_special")) {
    const auto plain = c["ids_no_special"].get<std::vector<std::vector<int64_t>>>();
    HfEncodeOptions options;
    options.add_special_tokens = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto encoded = tokenizer->Encode(inputs[i], options);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      EXPECT_EQ(encoded->ids, plain[i]) << "input " << Show(inputs[i]) << " without specials";
    }
  }
  if (c.contains("added_vocab")) {
    for (const auto& [content, id] : c["added_vocab"].items()) {
      EXPECT_EQ(tokenizer->TokenToId(content), id.get<int64_t>()) << "added token " << content;
    }
  }
  for (const Json& run : c.value("runs", Json::array())) {
    const HfEncodeOptions options = RunOptions(run);
    Json shown = run;
    shown.erase("ids");
    shown.erase("attention_mask");
    const auto run_ids = run["ids"].get<std::vector<std::vector<int64_t>>>();
    const auto masks = run["attention_mask"].get<std::vector<std::vector<int64_t>>>();
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto encoded = tokenizer->Encode(inputs[i], options);
      ASSERT_TRUE(encoded.ok()) << encoded.status() << " " << run.dump();
      EXPECT_EQ(encoded->ids, run_ids[i]) << "input " << Show(inputs[i]) << " run " << shown;
      EXPECT_EQ(encoded->attention_mask, masks[i]) << "input " << Show(inputs[i]) << " " << shown;
    }
  }
  for (const char* key : {"pad_id", "bos_id", "eos_id"}) {
    if (!c.contains(key)) continue;
    const std::optional<int64_t> ours = std::string(key) == "pad_id"   ? tokenizer->pad_id()
                                        : std::string(key) == "bos_id" ? tokenizer->bos_id()
                                                                       : tokenizer->eos_id();
    if (c[key].is_null()) {
      EXPECT_FALSE(ours.has_value()) << key;
    } else {
      EXPECT_EQ(ours, c[key].get<int64_t>()) << key;
    }
  }
}

// One test per group of cases (name prefix), so a failure names the feature.
void CheckGroup(const std::string& prefix, size_t at_least) {
  size_t seen = 0;
  for (const Json& c : Cases()["cases"]) {
    if (c["name"].get<std::string>().rfind(prefix, 0) != 0) continue;
    ++seen;
    CheckCase(c);
  }
  EXPECT_GE(seen, at_least) << "cases named " << prefix << "*";
}

TEST(HfTokenizerCases, SplitBehaviours) { CheckGroup("split_", 18); }
TEST(HfTokenizerCases, RegexSemantics) { CheckGroup("regex_", 9); }
TEST(HfTokenizerCases, Normalizers) { CheckGroup("normalizer_", 5); }
TEST(HfTokenizerCases, AddedTokens) { CheckGroup("added_tokens_", 2); }
TEST(HfTokenizerCases, BpeOptions) { CheckGroup("bpe_", 7); }
TEST(HfTokenizerCases, PostProcessorsTruncationPadding) { CheckGroup("post_", 5); }
TEST(HfTokenizerCases, TransformersConfigTokens) { CheckGroup("transformers_", 1); }

TEST(HfTokenizerCases, EveryCaseBelongsToAGroup) {
  for (const Json& c : Cases()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    bool known = false;
    for (const char* prefix :
         {"split_", "regex_", "normalizer_", "added_tokens_", "bpe_", "post_", "transformers_"}) {
      known = known || name.rfind(prefix, 0) == 0;
    }
    EXPECT_TRUE(known) << name;
  }
  EXPECT_EQ(Cases()["tokenizers"], "0.23.2");
}

}  // namespace
}  // namespace ditserve::tokenizers
