#include "models/tokenizers/added_tokens.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

namespace ditserve::tokenizers {

AddedTokens::AddedTokens(std::vector<std::pair<std::string, int64_t>> tokens) {
  absl::flat_hash_set<std::string> seen;
  for (auto& token : tokens) {
    if (token.first.empty() || !seen.insert(token.first).second) continue;
    first_byte_[static_cast<unsigned char>(token.first[0])] = true;
    tokens_.push_back(std::move(token));
  }
  // Longest first, so the first match at a position is the longest one.
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const auto& a, const auto& b) {
    return a.first.size() > b.first.size();
  });
}

std::vector<AddedTokens::Piece> AddedTokens::Split(absl::string_view text) const {
  std::vector<Piece> pieces;
  size_t plain_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const std::pair<std::string, int64_t>* match = nullptr;
    if (first_byte_[static_cast<unsigned char>(text[pos])]) {
      const absl::string_view rest = text.substr(pos);
      for (const auto& token : tokens_) {
        if (rest.size() >= token.first.size() &&
            rest.substr(0, token.first.size()) == token.first) {
          match = &token;
          break;
        }
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > plain_begin) pieces.push_back({text.substr(plain_begin, pos - plain_begin), -1});
    pieces.push_back({text.substr(pos, match->first.size()), match->second});
    pos += match->first.size();
    plain_begin = pos;
  }
  if (plain_begin < text.size()) pieces.push_back({text.substr(plain_begin), -1});
  return pieces;
}

}  // namespace ditserve::tokenizers
