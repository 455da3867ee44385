#include "models/tokenizers/added_tokens.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "models/tokenizers/unicode_text.h"

namespace ditserve::tokenizers {
namespace {

// Start of the code point that ends at `end` (> 0) in valid UTF-8.
size_t PreviousCharStart(absl::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

int32_t CharBefore(absl::string_view text, size_t end) {
  int32_t c;
  DecodeUtf8(text, PreviousCharStart(text, end), &c);
  return c;
}

int32_t CharAt(absl::string_view text, size_t pos) {
  int32_t c;
  DecodeUtf8(text, pos, &c);
  return c;
}

// Start of the whitespace run that ends at `end` (tokenizers: \s*$ on text[..end]).
size_t WhitespaceRunStart(absl::string_view text, size_t end) {
  while (end > 0 && IsUnicodeWhitespace(CharBefore(text, end))) end = PreviousCharStart(text, end);
  return end;
}

// End of the whitespace run that starts at `begin` (tokenizers: ^\s* on text[begin..]).
size_t WhitespaceRunEnd(absl::string_view text, size_t begin) {
  while (begin < text.size()) {
    int32_t c;
    const size_t len = DecodeUtf8(text, begin, &c);
    if (!IsUnicodeWhitespace(c)) break;
    begin += len;
  }
  return begin;
}

}  // namespace

AddedTokens::AddedTokens(std::vector<std::pair<std::string, int64_t>> tokens) {
  std::vector<Token> plain;
  plain.reserve(tokens.size());
  for (auto& [content, id] : tokens) plain.push_back(Token{std::move(content), id});
  *this = WithFlags(std::move(plain));
}

AddedTokens AddedTokens::WithFlags(std::vector<Token> tokens) {
  AddedTokens out;
  absl::flat_hash_set<std::string> seen;
  for (auto& token : tokens) {
    if (token.content.empty() || !seen.insert(token.content).second) continue;
    out.first_byte_[static_cast<unsigned char>(token.content[0])] = true;
    out.tokens_.push_back(std::move(token));
  }
  // Longest first, so the first match at a position is the longest one.
  std::stable_sort(out.tokens_.begin(), out.tokens_.end(), [](const Token& a, const Token& b) {
    return a.content.size() > b.content.size();
  });
  return out;
}

std::vector<AddedTokens::Piece> AddedTokens::Split(absl::string_view text) const {
  std::vector<Piece> pieces;
  size_t taken = 0;  // end of the last accepted occurrence
  for (size_t pos = 0; pos < text.size();) {
    const Token* match = nullptr;
    if (first_byte_[static_cast<unsigned char>(text[pos])]) {
      const absl::string_view rest = text.substr(pos);
      for (const Token& token : tokens_) {
        if (rest.size() >= token.content.size() &&
            rest.substr(0, token.content.size()) == token.content) {
          match = &token;
          break;
        }
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + match->content.size();
    pos = stop;  // the search resumes after the occurrence, accepted or not
    if (match->single_word) {
      const bool free_before = start == 0 || !IsRegexWordChar(CharBefore(text, start));
      const bool free_after = stop == text.size() || !IsRegexWordChar(CharAt(text, stop));
      if (!free_before || !free_after) continue;
    }
    if (match->lstrip) start = std::max(WhitespaceRunStart(text, start), taken);
    if (match->rstrip) stop = WhitespaceRunEnd(text, stop);
    if (taken < start) pieces.push_back({text.substr(taken, start - taken), -1});
    pieces.push_back({text.substr(start, stop - start), match->id});
    taken = stop;
  }
  if (taken < text.size()) pieces.push_back({text.substr(taken), -1});
  return pieces;
}

}  // namespace ditserve::tokenizers
