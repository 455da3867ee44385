// Splits raw text around "added" (special) tokens such as <|endoftext|> or </s>, the way the
// Hugging Face fast tokenizers do before normalisation: occurrences are found in the raw text,
// leftmost first and, among tokens starting at the same byte, the longest; each becomes its id
// directly and the text between them is tokenised on its own. Torch-free.
//
// Thread-safety: immutable after construction; Split() may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

class AddedTokens {
 public:
  // One piece of split text: either a special token (id >= 0, text = its content) or plain text
  // (id = -1).
  struct Piece {
    absl::string_view text;
    int64_t id = -1;
  };

  AddedTokens() = default;
  // `tokens`: (content, id). Empty contents are ignored; a content listed twice keeps the first id.
  explicit AddedTokens(std::vector<std::pair<std::string, int64_t>> tokens);

  // Pieces of `text` in order; plain pieces are never empty. Views point into `text`.
  std::vector<Piece> Split(absl::string_view text) const;

  size_t size() const { return tokens_.size(); }

 private:
  std::vector<std::pair<std::string, int64_t>> tokens_;  // longest content first
  bool first_byte_[256] = {};  // fast rejection: can a token start with this byte?
};

}  // namespace ditserve::tokenizers
