// Building blocks of the CLIP tokenizer on hand-made inputs: the BPE merge order, unknown
// characters, the byte-to-character table, the normaliser and the special-token splitter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "models/tokenizers/added_tokens.h"
#include "models/tokenizers/bpe_model.h"
#include "models/tokenizers/byte_level.h"
#include "models/tokenizers/clip_normalizer.h"

namespace ditserve::tokenizers {
namespace {

namespace fs = std::filesystem;

// Writes vocab.json / merges.txt into a fresh folder and loads them with suffix "</w>".
absl::StatusOr<BpeModel> LoadBpe(const std::string& name, const std::string& vocab,
                                 const std::string& merges) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::create_directories(dir);
  std::ofstream(dir / "vocab.json", std::ios::trunc) << vocab;
  std::ofstream(dir / "merges.txt", std::ios::trunc) << merges;
  return BpeModel::Load((dir / "vocab.json").string(), (dir / "merges.txt").string(), "</w>",
                        "<unk>");
}

constexpr char kVocab[] =
    R"({"<unk>": 0, "a": 1, "b": 2, "c": 3, "a</w>": 4, "b</w>": 5, "c</w>": 6,)"
    R"( "ab": 7, "bc</w>": 8, "abc</w>": 9, "aa": 10, "aa</w>": 11})";

std::vector<int64_t> Encode(const BpeModel& bpe, const std::string& word) {
  std::vector<int64_t> ids;
  bpe.EncodeWord(word, &ids);
  return ids;
}

TEST(BpeModel, LowestRankMergesFirst) {
  // "a b" before "ab c</w>": abc -> ab, c</w> -> abc</w>.
  auto first = LoadBpe("bpe_rank1", kVocab, "#version: 0.2\na b\nab c</w>\nb c</w>\n");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Encode(*first, "abc"), (std::vector<int64_t>{9}));
  // "b c</w>" first: abc -> a, bc</w>, and no merge joins those.
  auto second = LoadBpe("bpe_rank2", kVocab, "#version: 0.2\nb c</w>\na b\nab c</w>\n");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Encode(*second, "abc"), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(first->merges_size(), 3u);
}

TEST(BpeModel, EqualRanksMergeLeftmostFirst) {
  auto bpe = LoadBpe("bpe_tie", kVocab, "a a\na a</w>\n");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  // a a a</w>: "a a" (rank 0) at 0 wins over "a a</w>" (rank 1) -> aa, a</w>.
  EXPECT_EQ(Encode(*bpe, "aaa"), (std::vector<int64_t>{10, 4}));
  // a a a a</w>: the leftmost "a a" merges (aa, a, a</w>), which leaves no "a a"; then
  // "a a</w>" (rank 1) -> aa, aa</w>.
  EXPECT_EQ(Encode(*bpe, "aaaa"), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(Encode(*bpe, "a"), (std::vector<int64_t>{4}));
}

TEST(BpeModel, UnknownCharactersBecomeUnkAndDoNotMerge) {
  auto bpe = LoadBpe("bpe_unk", kVocab, "a b\n");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_EQ(Encode(*bpe, "axb"), (std::vector<int64_t>{1, 0, 5}));
  EXPECT_EQ(Encode(*bpe, "\u00e9"), (std::vector<int64_t>{0}));  // two bytes, one character
  // Cached results are the same as fresh ones.
  EXPECT_EQ(Encode(*bpe, "axb"), (std::vector<int64_t>{1, 0, 5}));
}

TEST(BpeModel, RejectsBadFilesNamingThem) {
  auto no_unk = LoadBpe("bpe_bad1", R"({"a": 0})", "");
  ASSERT_FALSE(no_unk.ok());
  EXPECT_NE(no_unk.status().message().find("vocab.json"), absl::string_view::npos);
  auto bad_merge = LoadBpe("bpe_bad2", kVocab, "a b\nb a\n");  // "ba" not in the vocab
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("merges.txt:2"), absl::string_view::npos);
  auto negative = LoadBpe("bpe_bad3", R"({"<unk>": -1})", "");
  EXPECT_FALSE(negative.ok());
}

TEST(ByteLevel, TableIsTheGpt2Mapping) {
  const auto& table = ByteToUnicodeTable();
  std::set<std::string> distinct(table.begin(), table.end());
  EXPECT_EQ(distinct.size(), 256u);
  EXPECT_EQ(table['!'], "!");
  EXPECT_EQ(table['a'], "a");
  EXPECT_EQ(table[0], "\u0100");
  EXPECT_EQ(table[' '], "\u0120");  // the familiar 'Ġ'
  EXPECT_EQ(table[0x7F], "\u0121");
  EXPECT_EQ(table[0xAD], "\u0143");  // the last remapped byte
  EXPECT_EQ(table[0xFF], "\u00ff");
  std::string out;
  AppendByteLevel("\xc3\xa9", &out);  // é = C3 A9, both visible
  EXPECT_EQ(out, "\u00c3\u00a9");
}

TEST(ClipNormalizer, NfcWhitespaceAndLowerCase) {
  EXPECT_EQ(NormalizeClipText("Hello \t\n World"), "hello world");
  EXPECT_EQ(NormalizeClipText("  x  "), " x ");
  EXPECT_EQ(NormalizeClipText("Caf\u0065\u0301\u00a0OK"), "caf\u00e9 ok");
  EXPECT_EQ(NormalizeClipText("\u03a3\u039f\u03a3"), "\u03c3\u03bf\u03c3");  // no final sigma
  EXPECT_EQ(NormalizeClipText("\u0130"), "i\u0307");
  EXPECT_EQ(NormalizeClipText("\u6771\u4eac \U0001F363"), "\u6771\u4eac \U0001F363");
  EXPECT_EQ(NormalizeClipText("a\u2028\u3000b\u0085c"), "a b c");
  EXPECT_TRUE(IsUnicodeWhitespace(0x3000));
  EXPECT_FALSE(IsUnicodeWhitespace(0x200B));  // zero-width space is not White_Space
}

TEST(AddedTokens, LeftmostLongestRawMatches) {
  AddedTokens added({{"<a>", 1}, {"<a><b>", 2}, {"<b>", 3}, {"", 9}});
  EXPECT_EQ(added.size(), 3u);
  const auto pieces = added.Split("x<a><b>y<b><a>");
  ASSERT_EQ(pieces.size(), 5u);
  EXPECT_EQ(pieces[0].text, "x");
  EXPECT_EQ(pieces[0].id, -1);
  EXPECT_EQ(pieces[1].id, 2);
  EXPECT_EQ(pieces[2].text, "y");
  EXPECT_EQ(pieces[3].id, 3);
  EXPECT_EQ(pieces[4].id, 1);
  EXPECT_TRUE(added.Split("").empty());
  const auto plain = added.Split("<A>");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].id, -1);
}

}  // namespace
}  // namespace ditserve::tokenizers
