#include "models/tokenizers/clip_tokenizer.h"

#include <re2/re2.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/byte_level.h"
#include "models/tokenizers/clip_normalizer.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {
namespace {

// RE2's \s is ASCII only; the reference (Oniguruma) \s is Unicode White_Space, spelled out here.
#define DITSERVE_WS "\\x{09}-\\x{0D}\\x{85}\\p{Z}"

// CLIP's pre-tokenisation pattern (tokenizer.json pre_tokenizer "Split", matches kept).
constexpr char kClipPattern[] =
    "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|"
    "[^" DITSERVE_WS "\\p{L}\\p{N}]+";

// The GPT-2 pattern of the ByteLevel pre-tokenizer, applied to each CLIP piece. Its whitespace
// alternatives (\s+(?!\S)|\s+, whose look-ahead RE2 lacks) are left out: CLIP pieces contain no
// whitespace, so they could never match. In practice this pass only splits a literal
// "<|startoftext|>" typed in other case (e.g. "<|StartOfText|>") into "<|", "startoftext", "|>".
constexpr char kByteLevelPattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" DITSERVE_WS "\\p{L}\\p{N}]+";

#undef DITSERVE_WS

absl::StatusOr<std::unique_ptr<re2::RE2>> Compile(const char* pattern) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<re2::RE2>(pattern, options);
  if (!re->ok()) {
    return absl::InternalError(absl::StrCat("cannot compile pattern ", pattern, ": ", re->error()));
  }
  return re;
}

// Calls `on_piece` for each match of `re` in `text`, left to right; with `keep_gaps`, the text
// between matches is passed on too (tokenizers' "Isolated" split), otherwise it is dropped
// ("Removed" with invert).
template <typename Fn>
void SplitWith(const re2::RE2& re, absl::string_view text, bool keep_gaps, Fn&& on_piece) {
  const re2::StringPiece input(text.data(), text.size());
  size_t pos = 0;
  size_t gap_begin = 0;
  re2::StringPiece match;
  while (pos < text.size() &&
         re.Match(input, pos, text.size(), re2::RE2::UNANCHORED, &match, 1)) {
    const size_t begin = static_cast<size_t>(match.data() - text.data());
    const size_t end = begin + match.size();
    if (match.empty()) {  // the patterns here never match empty; guard against looping anyway
      pos = begin + 1;
      continue;
    }
    if (keep_gaps && begin > gap_begin) on_piece(text.substr(gap_begin, begin - gap_begin));
    on_piece(text.substr(begin, end - begin));
    pos = gap_begin = end;
  }
  if (keep_gaps && gap_begin < text.size()) on_piece(text.substr(gap_begin));
}

absl::StatusOr<int64_t> RequireId(const BpeModel& bpe, const std::string& token,
                                  const std::string& vocab_path) {
  auto id = bpe.TokenToId(token);
  if (!id) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_path, ": special token \"", token, "\" is not in the vocabulary"));
  }
  return *id;
}

}  // namespace

ClipTokenizer::ClipTokenizer(BpeModel bpe) : bpe_(std::move(bpe)) {}
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

absl::StatusOr<ClipTokenizer> ClipTokenizer::Load(const std::string& tokenizer_dir) {
  const std::string config_path = JoinPath(tokenizer_dir, "tokenizer_config.json");
  const std::string vocab_path = JoinPath(tokenizer_dir, "vocab.json");
  const std::string merges_path = JoinPath(tokenizer_dir, "merges.txt");
  ASSIGN_OR_RETURN(TokenizerConfig config, LoadTokenizerConfig(config_path));

  // CLIPTokenizer's defaults where the config is silent.
  const std::string bos = config.bos_token.value_or("<|startoftext|>");
  const std::string eos = config.eos_token.value_or("<|endoftext|>");
  const std::string unk = config.unk_token.value_or("<|endoftext|>");
  const std::string pad = config.pad_token.value_or("<|endoftext|>");

  ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Load(vocab_path, merges_path, "</w>", unk));
  ClipTokenizer tokenizer(std::move(bpe));
  ASSIGN_OR_RETURN(tokenizer.bos_id_, RequireId(tokenizer.bpe_, bos, vocab_path));
  ASSIGN_OR_RETURN(tokenizer.eos_id_, RequireId(tokenizer.bpe_, eos, vocab_path));
  ASSIGN_OR_RETURN(tokenizer.pad_id_, RequireId(tokenizer.bpe_, pad, vocab_path));
  ASSIGN_OR_RETURN(const int64_t unk_id, RequireId(tokenizer.bpe_, unk, vocab_path));

  std::vector<std::pair<std::string, int64_t>> added = {
      {bos, tokenizer.bos_id_}, {eos, tokenizer.eos_id_}, {pad, tokenizer.pad_id_}, {unk, unk_id}};
  for (const AddedTokenEntry& entry : config.added_tokens_decoder) {
    added.emplace_back(entry.content, entry.id);
  }
  for (const std::string& token : config.extra_special_tokens) {
    auto id = tokenizer.bpe_.TokenToId(token);
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_path, ": extra special token \"", token, "\" is not in ", vocab_path));
    }
    added.emplace_back(token, *id);
  }
  tokenizer.added_ = AddedTokens(std::move(added));

  ASSIGN_OR_RETURN(tokenizer.clip_split_, Compile(kClipPattern));
  ASSIGN_OR_RETURN(tokenizer.byte_level_split_, Compile(kByteLevelPattern));
  if (config.model_max_length && *config.model_max_length >= 2 &&
      *config.model_max_length <= (1 << 20)) {
    tokenizer.model_max_length_ = static_cast<int>(*config.model_max_length);
  }
  return tokenizer;
}

void ClipTokenizer::TokenizePlain(absl::string_view text, std::vector<int64_t>* out) const {
  const std::string normalized = NormalizeClipText(text);
  std::string word;
  SplitWith(*clip_split_, normalized, /*keep_gaps=*/false, [&](absl::string_view piece) {
    SplitWith(*byte_level_split_, piece, /*keep_gaps=*/true, [&](absl::string_view sub) {
      word.clear();
      AppendByteLevel(sub, &word);
      bpe_.EncodeWord(word, out);
    });
  });
}

std::vector<int64_t> ClipTokenizer::Tokenize(absl::string_view text) const {
  std::vector<int64_t> ids;
  for (const AddedTokens::Piece& piece : added_.Split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
    } else {
      TokenizePlain(piece.text, &ids);
    }
  }
  return ids;
}

std::vector<int64_t> ClipTokenizer::EncodeUnpadded(absl::string_view text) const {
  std::vector<int64_t> ids = {bos_id_};
  const std::vector<int64_t> tokens = Tokenize(text);
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  ids.push_back(eos_id_);
  return ids;
}

std::vector<int64_t> ClipTokenizer::Encode(absl::string_view text, int max_length) const {
  const size_t length = static_cast<size_t>(std::max(max_length, 2));
  std::vector<int64_t> tokens = Tokenize(text);
  if (tokens.size() > length - 2) tokens.resize(length - 2);
  std::vector<int64_t> ids;
  ids.reserve(length);
  ids.push_back(bos_id_);
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  ids.push_back(eos_id_);
  ids.resize(length, pad_id_);
  return ids;
}

}  // namespace ditserve::tokenizers
