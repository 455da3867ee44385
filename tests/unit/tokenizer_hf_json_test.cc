// HfTokenizer on small tokenizer.json files written by the test: what is refused and how the
// message names the file and the JSON field, what is accepted, and the regex translation to PCRE2.
// The ids of real tokenizers are checked in tokenizer_hf_parity_test.cc and
// tokenizer_hf_cases_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "models/tokenizers/pcre2_regex.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// A tiny valid tokenizer.json: byte-level BPE over "ab" with one merge and one added token.
Json MinimalTokenizer() {
  return Json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 4, "content": "<s>", "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\s+|\\S+"}, "behavior": "Isolated",
       "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [4], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
              "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<s>": 4},
              "merges": ["a b"]}
  })");
}

std::string WriteFolder(const std::string& name, const std::string& tokenizer_json) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  (void)ditserve::RemoveTree(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << tokenizer_json;
  return dir.string();
}

absl::StatusOr<HfTokenizer> LoadJson(const std::string& name, const Json& json) {
  return LoadHfTokenizer(WriteFolder(name, json.dump()));
}

std::vector<int64_t> Ids(const HfTokenizer& tokenizer, const std::string& text,
                         HfEncodeOptions options = {}) {
  auto encoded = tokenizer.Encode(text, options);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  return encoded.ok() ? encoded->ids : std::vector<int64_t>{};
}

TEST(HfTokenizerJson, MinimalFileLoadsAndEncodes) {
  auto tokenizer = LoadJson("hf_minimal", MinimalTokenizer());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->vocab_size(), 5u);
  EXPECT_EQ(tokenizer->num_special_tokens_to_add(), 1u);
  // "ab b" -> words "ab", " ", "b" -> ab, Ġ, b; the template puts <s> first.
  EXPECT_EQ(Ids(*tokenizer, "ab b"), (std::vector<int64_t>{4, 2, 3, 1}));
  EXPECT_EQ(Ids(*tokenizer, "<s>ab"), (std::vector<int64_t>{4, 4, 2}));
  HfEncodeOptions plain;
  plain.add_special_tokens = false;
  EXPECT_EQ(Ids(*tokenizer, "", plain), std::vector<int64_t>{});
  EXPECT_EQ(Ids(*tokenizer, ""), std::vector<int64_t>{4});
}

TEST(HfTokenizerJson, MergesAsPairsEqualMergesAsStrings) {
  Json json = MinimalTokenizer();
  json["model"]["merges"] = Json::parse(R"([["a", "b"]])");
  auto tokenizer = LoadJson("hf_pairs", json);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(Ids(*tokenizer, "ab"), (std::vector<int64_t>{4, 2}));
}

TEST(HfTokenizerJson, TruncationAndPaddingOptions) {
  auto tokenizer = LoadJson("hf_options", MinimalTokenizer());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // No pad token in a folder without tokenizer_config.json: padding needs an explicit pad id.
  HfEncodeOptions pad;
  pad.max_length = 6;
  pad.pad_to_max_length = true;
  auto refused = tokenizer->Encode("ab", pad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no pad token"), absl::string_view::npos);
  pad.pad_id = 0;
  pad.padding_side = Side::kLeft;
  auto left = tokenizer->Encode("ab b", pad);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->ids, (std::vector<int64_t>{0, 0, 4, 2, 3, 1}));
  EXPECT_EQ(left->attention_mask, (std::vector<int64_t>{0, 0, 1, 1, 1, 1}));
  // Truncation keeps room for <s>; left truncation keeps the last ids.
  HfEncodeOptions cut;
  cut.max_length = 3;
  cut.truncation = true;
  EXPECT_EQ(Ids(*tokenizer, "ab b", cut), (std::vector<int64_t>{4, 2, 3}));
  cut.truncation_side = Side::kLeft;
  EXPECT_EQ(Ids(*tokenizer, "ab b", cut), (std::vector<int64_t>{4, 3, 1}));
  cut.max_length = 0;
  EXPECT_FALSE(tokenizer->Encode("ab", cut).ok());  // no room for <s>
  cut.add_special_tokens = false;
  EXPECT_EQ(Ids(*tokenizer, "ab", cut), std::vector<int64_t>{});
  HfEncodeOptions no_length;
  no_length.truncation = true;
  EXPECT_FALSE(tokenizer->Encode("ab", no_length).ok());
  // Without truncation, a longer text is not cut and not padded.
  pad.max_length = 2;
  pad.truncation = false;
  EXPECT_EQ(Ids(*tokenizer, "ab b", pad), (std::vector<int64_t>{4, 2, 3, 1}));
}

TEST(HfTokenizerJson, InvalidUtf8TextIsRefused) {
  auto tokenizer = LoadJson("hf_utf8", MinimalTokenizer());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto encoded = tokenizer->Encode("a\xff");
  ASSERT_FALSE(encoded.ok());
  EXPECT_EQ(encoded.status().code(), absl::StatusCode::kInvalidArgument);
}

// One damaged field: the load fails with INVALID_ARGUMENT naming tokenizer.json and `where`.
struct Damage {
  const char* name;
  std::function<void(Json&)> edit;
  const char* where;
  const char* also = "";
};

TEST(HfTokenizerJson, MalformedFilesNameFileAndField) {
  const std::vector<Damage> cases = {
      {"version", [](Json& j) { j["version"] = "2.0"; }, ": version: "},
      {"no_model", [](Json& j) { j.erase("model"); }, ": model: missing"},
      {"model_type", [](Json& j) { j["model"]["type"] = "WordPiece"; }, ": model.type: ",
       "\"WordPiece\" is not supported"},
      {"dropout", [](Json& j) { j["model"]["dropout"] = 0.1; }, ": model.dropout: "},
      {"vocab_id", [](Json& j) { j["model"]["vocab"]["a"] = -1; }, ": model.vocab[\"a\"]: "},
      {"vocab_type", [](Json& j) { j["model"]["vocab"] = Json::array(); }, ": model.vocab: "},
      {"merge_text", [](Json& j) { j["model"]["merges"] = {"a b", "abb"}; },
       ": model.merges[1]: ", "left right"},
      {"merge_unknown", [](Json& j) { j["model"]["merges"] = {"a b", "b a"}; },
       ": model.merges[1]: ", "\"ba\""},
      {"merge_pair", [](Json& j) { j["model"]["merges"] = Json::parse(R"([["a"]])"); },
       ": model.merges[0]: "},
      {"merge_mixed", [](Json& j) { j["model"]["merges"] = Json::parse(R"(["a b", ["a", "b"]])"); },
       ": model.merges[1]: ", "mix"},
      {"unk", [](Json& j) { j["model"]["unk_token"] = "<unk>"; }, ": model.vocab: ", "<unk>"},
      {"flag_type", [](Json& j) { j["model"]["byte_fallback"] = "yes"; },
       ": model.byte_fallback: "},
      {"normalizer", [](Json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, ": normalizer.type: ",
       "\"NFKC\" is not supported"},
      {"pre_tokenizer",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Metaspace"}}; },
       ": pre_tokenizer.pretokenizers[1].type: ", "\"Metaspace\""},
      {"split_regex",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
       ": pre_tokenizer.pretokenizers[0].pattern.Regex: "},
      {"split_pattern",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "a"; },
       ": pre_tokenizer.pretokenizers[0].pattern: "},
      {"split_behavior",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
       ": pre_tokenizer.pretokenizers[0].behavior: "},
      {"onig_intersection",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-z&&[^b]]"; },
       ": pre_tokenizer.pretokenizers[0].pattern.Regex: ", "intersection"},
      {"post_type", [](Json& j) { j["post_processor"] = {{"type", "Mystery"}}; },
       ": post_processor.type: ", "\"Mystery\""},
      {"post_special",
       [](Json& j) { j["post_processor"]["special_tokens"].erase("<s>"); },
       ": post_processor.", "\"<s>\""},
      {"post_single_b",
       [](Json& j) { j["post_processor"]["single"][1]["Sequence"]["id"] = "B"; },
       ": post_processor.single[1]: "},
      {"added_content", [](Json& j) { j["added_tokens"][0].erase("content"); },
       ": added_tokens[0].content: missing"},
      {"added_id", [](Json& j) { j["added_tokens"][0]["id"] = "four"; },
       ": added_tokens[0].id: "},
      {"added_flag", [](Json& j) { j["added_tokens"][0]["lstrip"] = 1; },
       ": added_tokens[0].lstrip: "},
  };
  for (const Damage& c : cases) {
    Json json = MinimalTokenizer();
    c.edit(json);
    auto loaded = LoadJson(std::string("hf_bad_") + c.name, json);
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    const std::string message(loaded.status().message());
    EXPECT_NE(message.find(std::string("tokenizer.json") + c.where), std::string::npos)
        << c.name << ": " << message;
    EXPECT_NE(message.find(c.also), std::string::npos) << c.name << ": " << message;
  }
}

TEST(HfTokenizerJson, UnreadableFoldersAreNamed) {
  const std::string empty = (fs::path(::testing::TempDir()) / "hf_empty_dir").string();
  fs::create_directories(empty);
  auto missing = LoadHfTokenizer(empty);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(empty), absl::string_view::npos);

  auto not_json = LoadHfTokenizer(WriteFolder("hf_not_json", "{\"model\": "));
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("tokenizer.json: not valid JSON"),
            absl::string_view::npos);
}

TEST(HfTokenizerJson, SlowQwen2FilesWithBadMergesNameTheLine) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hf_slow_bad";
  (void)ditserve::RemoveTree(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "vocab.json") << R"({"a": 0, "b": 1, "ab": 2})";
  std::ofstream(dir / "merges.txt") << "#version: 0.2\na b\nb a\n";
  auto loaded = LoadHfTokenizer(dir.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("merges.txt:3"), absl::string_view::npos)
      << loaded.status();
  std::ofstream(dir / "merges.txt", std::ios::trunc) << "#version: 0.2\na b\n";
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"added_tokens_decoder": {"3": {"content": "<|endoftext|>", "special": true}},
            "eos_token": "<|endoftext|>"})";
  auto good = LoadHfTokenizer(dir.string());
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->TokenToId("<|endoftext|>"), 3);
  EXPECT_EQ(good->eos_id(), 3);
  EXPECT_EQ(good->pad_id(), 3);  // Qwen2Tokenizer's default pad token, absent from the config
  EXPECT_EQ(Ids(*good, "ab<|endoftext|>b"), (std::vector<int64_t>{2, 3, 1}));
}

// TokenizerFolder::InMemory (the fuzz target's entry point) runs the folder reader's code: the same
// result, the same errors (naming the same paths) as the files on disk.
TEST(HfTokenizerJson, InMemoryFolderLoadsAsTheFolderOnDisk) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hf_in_memory";
  auto same = [&](const std::map<std::string, std::string>& files, const std::string& what) {
    (void)ditserve::RemoveTree(dir);
    fs::create_directories(dir);
    std::map<std::string, absl::string_view> views;
    for (const auto& [name, bytes] : files) {
      std::ofstream(dir / name, std::ios::binary) << bytes;
      views.emplace(name, bytes);
    }
    auto disk = LoadHfTokenizer(dir.string());
    auto memory = LoadHfTokenizer(TokenizerFolder::InMemory(dir.string(), views));
    ASSERT_EQ(disk.status(), memory.status()) << what;
    if (!disk.ok()) return;
    for (const char* text : {"ab ab<s>b", "<|endoftext|>a", ""}) {
      EXPECT_EQ(Ids(*disk, text), Ids(*memory, text)) << what;
    }
    EXPECT_EQ(disk->pad_id(), memory->pad_id()) << what;
    EXPECT_EQ(disk->eos_id(), memory->eos_id()) << what;
  };
  const std::string json = MinimalTokenizer().dump();
  const std::string config =
      R"({"added_tokens_decoder": {"5": {"content": "<|endoftext|>", "special": true}},
          "eos_token": "<|endoftext|>", "pad_token": "<s>"})";
  same({{"tokenizer.json", json}}, "tokenizer.json");
  same({{"tokenizer.json", json}, {"tokenizer_config.json", config}}, "with a config");
  same({{"tokenizer.json", json},
        {"tokenizer_config.json", config},
        {"special_tokens_map.json", R"({"pad_token": "<|endoftext|>"})"}},
       "with a special tokens map");
  same({}, "empty");
  same({{"tokenizer.json", "{\"model\": "}}, "not JSON");
  same({{"tokenizer.json", json}, {"tokenizer_config.json", "[1]"}}, "config not an object");
  same({{"tokenizer.json", json}, {"special_tokens_map.json", R"({"eos_token": 3})"}},
       "bad special tokens map");
  for (const char* merges : {"#version: 0.2\na b\nb a\n", "#version: 0.2\na b\n", "a\n"}) {
    same({{"vocab.json", R"({"a": 0, "b": 1, "ab": 2})"}, {"merges.txt", merges}}, merges);
  }
  same({{"vocab.json", R"({"a": -1})"}, {"merges.txt", ""}}, "slow, bad vocab");
  same({{"vocab.json", R"({"a": 0})"}}, "slow, no merges.txt");
}

TEST(Pcre2Regex, OnigurumaClassesAreTranslated) {
  auto t = [](const char* p) {
    auto out = TranslateOnigurumaPattern(p);
    return out.ok() ? *out : std::string("error: ") + std::string(out.status().message());
  };
  EXPECT_EQ(t("\\s+(?!\\S)"),
            "[\\t-\\r\\x{85}\\p{Zs}\\p{Zl}\\p{Zp}]+(?![^\\t-\\r\\x{85}\\p{Zs}\\p{Zl}\\p{Zp}])");
  EXPECT_EQ(t("[^\\s\\p{L}]"), "[^\\t-\\r\\x{85}\\p{Zs}\\p{Zl}\\p{Zp}\\p{L}]");
  EXPECT_EQ(t("(?i:'s)|^a$"), "(?i:'s)|(?m:^)a(?m:$)");
  EXPECT_EQ(t("(?m:.)"), "(?s:.)");
  EXPECT_EQ(t("\\u00e9\\h"), "\\x{00e9}[0-9a-fA-F]");
  EXPECT_EQ(t("[]a]"), "[]a]");
  EXPECT_NE(t("[a[b]]").find("nested character set"), std::string::npos);
  EXPECT_NE(t("(?W:a)").find("option"), std::string::npos);
}

TEST(Pcre2Regex, WhitespaceIsUnicodeWhiteSpaceAndEmptyMatchesAdvance) {
  auto regex = Pcre2Regex::Compile("\\s");
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::vector<std::pair<size_t, size_t>> matches;
  // U+0085 and U+3000 are White_Space; U+180E (PCRE2's own \s) and U+200B are not.
  ASSERT_TRUE(regex->FindAll("\u0085\u180e\u200b\u3000", &matches).ok());
  EXPECT_EQ(matches, (std::vector<std::pair<size_t, size_t>>{{0, 2}, {8, 11}}));
  auto empty = Pcre2Regex::Compile("x*");
  ASSERT_TRUE(empty.ok());
  matches.clear();
  ASSERT_TRUE(empty->FindAll("axxb", &matches).ok());
  EXPECT_EQ(matches, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}, {4, 4}}));
  auto literal = Pcre2Regex::CompileLiteral("a.b(");
  ASSERT_TRUE(literal.ok());
  matches.clear();
  ASSERT_TRUE(literal->FindAll("axb(a.b(", &matches).ok());
  EXPECT_EQ(matches, (std::vector<std::pair<size_t, size_t>>{{4, 8}}));
}

}  // namespace
}  // namespace ditserve::tokenizers
