// Splits text around "added" tokens such as <|endoftext|>, </s> or [INST], the way the Hugging
// Face `tokenizers` AddedVocabulary does before (or, for "normalized" tokens, after) normalisation:
// occurrences are found leftmost first and, among tokens starting at the same byte, the longest
// (Aho-Corasick leftmost-longest); the search resumes after each occurrence. Each accepted one
// becomes its id directly and the text between them is tokenised on its own. Torch-free.
//
// Per-token flags, as tokenizers applies them to each occurrence:
//   single_word: the occurrence is dropped (left as plain text) unless it neither follows nor
//                precedes a word character (regex \w); a dropped occurrence is still skipped over;
//   lstrip:      Unicode whitespace just before the occurrence joins it (never text already taken
//                by the previous token);
//   rstrip:      Unicode whitespace just after the occurrence joins it.
// With flags, the text must be valid UTF-8.
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
  struct Token {
    std::string content;
    int64_t id = -1;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
  };

  // One piece of split text: either an added token (id >= 0, text = the content plus any stripped
  // whitespace) or plain text (id = -1).
  struct Piece {
    absl::string_view text;
    int64_t id = -1;
  };

  AddedTokens() = default;
  // `tokens`: (content, id), no flags. Empty contents are ignored; a content listed twice keeps the
  // first id.
  explicit AddedTokens(std::vector<std::pair<std::string, int64_t>> tokens);
  // Same, with flags (a content listed twice keeps its first entry).
  static AddedTokens WithFlags(std::vector<Token> tokens);

  // Pieces of `text` in order; plain pieces are never empty. Views point into `text`.
  std::vector<Piece> Split(absl::string_view text) const;

  size_t size() const { return tokens_.size(); }
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<Token> tokens_;  // longest content first
  bool first_byte_[256] = {};  // fast rejection: can a token start with this byte?
};

}  // namespace ditserve::tokenizers
