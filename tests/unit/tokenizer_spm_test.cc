// Our SentencePiece pieces on hand-made models: the wire-format reader, the normaliser's whitespace
// rules and the unigram Viterbi search (scores, <unk> fallback and merging, unused pieces).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "models/tokenizers/spm_model_proto.h"
#include "models/tokenizers/spm_normalizer.h"
#include "models/tokenizers/unigram_model.h"

namespace ditserve::tokenizers {
namespace {

// A tiny protobuf writer, enough to build ModelProto bytes.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Key(int field, int wire) { return Varint((static_cast<uint64_t>(field) << 3) | wire); }
std::string Bytes(int field, const std::string& b) { return Key(field, 2) + Varint(b.size()) + b; }
std::string Float(int field, float f) {
  std::string out = Key(field, 5);
  char raw[4];
  std::memcpy(raw, &f, 4);
  return out + std::string(raw, 4);
}
std::string Piece(const std::string& text, float score, int type = 1) {
  return Bytes(1, Bytes(1, text) + Float(2, score) + Key(3, 0) + Varint(type));
}

// <unk>, then pieces; no character map (identity normalisation).
std::string Model(const std::vector<std::pair<std::string, float>>& pieces,
                  const std::string& extra = "") {
  std::string out = Piece("<unk>", 0, 2) + Piece("</s>", 0, 3);
  for (const auto& [text, score] : pieces) out += Piece(text, score);
  out += Bytes(2, Key(3, 0) + Varint(1));  // trainer_spec.model_type = UNIGRAM
  return out + extra;
}

std::vector<int64_t> Encode(const SpmModelProto& proto, const std::string& text) {
  auto normalizer = SpmNormalizer::Create(proto, "m");
  auto model = UnigramModel::Create(proto, "m");
  EXPECT_TRUE(normalizer.ok() && model.ok());
  std::vector<int64_t> ids;
  model->Encode(normalizer->Normalize(text), &ids);
  return ids;
}

TEST(SpmModelProto, ReadsPiecesAndSpecs) {
  const std::string bytes =
      Model({{"\u2581a", -1.0f}}, Bytes(3, Bytes(1, "identity") + Key(3, 0) + Varint(0)) +
                                      Key(9, 0) + Varint(77));  // unknown field 9 is skipped
  auto proto = ParseSpmModelProto(bytes, "x.model");
  ASSERT_TRUE(proto.ok()) << proto.status();
  ASSERT_EQ(proto->pieces.size(), 3u);
  EXPECT_EQ(proto->pieces[0].type, SpmModelProto::PieceType::kUnknown);
  EXPECT_EQ(proto->pieces[2].piece, "\u2581a");
  EXPECT_FLOAT_EQ(proto->pieces[2].score, -1.0f);
  EXPECT_EQ(proto->model_type, 1);
  EXPECT_EQ(proto->normalizer_name, "identity");
  EXPECT_FALSE(proto->add_dummy_prefix);
  EXPECT_TRUE(proto->remove_extra_whitespaces);
}

TEST(SpmModelProto, RejectsMalformedBytesNamingTheFile) {
  const std::string good = Model({{"a", -1.0f}});
  for (const std::string& bad : {std::string("\xff\xff\xff"), good.substr(0, good.size() - 3),
                                 std::string(""), Bytes(1, "\x0a\x05" "ab")}) {
    auto proto = ParseSpmModelProto(bad, "bad.model");
    ASSERT_FALSE(proto.ok());
    EXPECT_NE(proto.status().message().find("bad.model"), absl::string_view::npos);
  }
}

TEST(SpmNormalizer, WhitespaceDummyPrefixAndEscaping) {
  auto proto = ParseSpmModelProto(Model({}), "m");
  ASSERT_TRUE(proto.ok());
  auto normalizer = SpmNormalizer::Create(*proto, "m");
  ASSERT_TRUE(normalizer.ok());
  EXPECT_EQ(normalizer->Normalize("  a   b  "), "\u2581a\u2581b");
  EXPECT_EQ(normalizer->Normalize("   "), "");
  EXPECT_EQ(normalizer->Normalize(""), "");
  EXPECT_EQ(normalizer->Normalize("x\xffy"), "\u2581x\ufffdy");  // malformed byte -> U+FFFD
  proto->remove_extra_whitespaces = false;
  proto->add_dummy_prefix = false;
  auto raw = SpmNormalizer::Create(*proto, "m");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->Normalize(" a  b "), "\u2581a\u2581\u2581b\u2581");
}

TEST(SpmNormalizer, RejectsBrokenCharsMap) {
  auto proto = ParseSpmModelProto(Model({}), "m");
  ASSERT_TRUE(proto.ok());
  proto->precompiled_charsmap = std::string("\xff\xff\x00\x00" "abc", 7);
  EXPECT_FALSE(SpmNormalizer::Create(*proto, "m").ok());
}

TEST(ValidUtf8, AcceptsWellFormedRejectsTheRest) {
  EXPECT_EQ(ValidUtf8Length("a"), 1u);
  EXPECT_EQ(ValidUtf8Length("\u00e9"), 2u);
  EXPECT_EQ(ValidUtf8Length("\u6771"), 3u);
  EXPECT_EQ(ValidUtf8Length("\U0001F363"), 4u);
  EXPECT_EQ(ValidUtf8Length("\xc0\x80"), 0u);          // overlong
  EXPECT_EQ(ValidUtf8Length("\xed\xa0\x80"), 0u);      // surrogate
  EXPECT_EQ(ValidUtf8Length("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(ValidUtf8Length("\xe6\x9d"), 0u);          // truncated
}

TEST(UnigramModel, ViterbiPicksTheBestScoringSegmentation) {
  // ids: 0 <unk>, 1 </s>, 2 ▁, 3 ▁ab, 4 a, 5 b, 6 ▁a, 7 c
  auto proto = ParseSpmModelProto(
      Model({{"\u2581", -1}, {"\u2581ab", -5}, {"a", -1}, {"b", -1}, {"\u2581a", -1}, {"c", -2}}),
      "m");
  ASSERT_TRUE(proto.ok());
  // ▁ab (-5) loses to ▁a + b (-2).
  EXPECT_EQ(Encode(*proto, "ab"), (std::vector<int64_t>{6, 5}));
  proto->pieces[3].score = -1.5f;  // now ▁ab (-1.5) wins
  EXPECT_EQ(Encode(*proto, "ab"), (std::vector<int64_t>{3}));
  proto->pieces[3].type = SpmModelProto::PieceType::kUnused;  // unused pieces never match
  EXPECT_EQ(Encode(*proto, "ab"), (std::vector<int64_t>{6, 5}));
}

TEST(UnigramModel, UnknownCharactersBecomeOneMergedUnk) {
  auto proto = ParseSpmModelProto(Model({{"\u2581", -1}, {"a", -1}}), "m");
  ASSERT_TRUE(proto.ok());
  // ▁ a <unk x> <unk y> a  ->  the two <unk>s merge.
  EXPECT_EQ(Encode(*proto, "axya"), (std::vector<int64_t>{2, 3, 0, 3}));
  EXPECT_EQ(Encode(*proto, "a\u6771"), (std::vector<int64_t>{2, 3, 0}));
  EXPECT_EQ(Encode(*proto, "x a"), (std::vector<int64_t>{2, 0, 2, 3}));
}

TEST(UnigramModel, RejectsModelsWithoutOrWithTwoUnk) {
  auto no_unk = ParseSpmModelProto(Piece("a", -1) + Piece("b", -1), "m");
  ASSERT_TRUE(no_unk.ok());
  EXPECT_FALSE(UnigramModel::Create(*no_unk, "m").ok());
  auto two_unk = ParseSpmModelProto(Piece("<unk>", 0, 2) + Piece("<u2>", 0, 2), "m");
  ASSERT_TRUE(two_unk.ok());
  EXPECT_FALSE(UnigramModel::Create(*two_unk, "m").ok());
  auto duplicate = ParseSpmModelProto(Piece("<unk>", 0, 2) + Piece("a", -1) + Piece("a", -2), "m");
  ASSERT_TRUE(duplicate.ok());
  EXPECT_FALSE(UnigramModel::Create(*duplicate, "m").ok());
}

}  // namespace
}  // namespace ditserve::tokenizers
