// The "pre_tokenizer" of a Hugging Face tokenizer.json, the kinds that byte-level BPE tokenizers
// use (tokenizers' pre_tokenizers/split.rs and byte_level.rs): a sequence of
//   Split(pattern, behavior, invert): the matches of a regex (Pcre2Regex, Oniguruma syntax) cut
//     each piece; `invert` swaps matches and gaps; the behavior says what happens to the matches:
//     Removed (dropped), Isolated (own pieces), MergedWithPrevious / MergedWithNext (joined to the
//     neighbouring gap), Contiguous (runs of matches or gaps joined);
//   ByteLevel(add_prefix_space, use_regex): a ' ' put before each piece that does not start with
//     one, optionally a split with GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (Isolated), then every byte mapped to its byte-level character (byte_level.h).
// Each step works on every piece the previous steps produced; empty pieces are dropped.
//
// Thread-safety: immutable after construction; Run() may run concurrently. Movable.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/pcre2_regex.h"

namespace ditserve::tokenizers {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class HfPreTokenizer {
 public:
  HfPreTokenizer() = default;
  HfPreTokenizer(HfPreTokenizer&&) noexcept = default;
  HfPreTokenizer& operator=(HfPreTokenizer&&) noexcept = default;

  void AddSplit(Pcre2Regex pattern, SplitBehavior behavior, bool invert);
  absl::Status AddByteLevel(bool add_prefix_space, bool use_regex);

  size_t size() const { return steps_.size(); }

  // The words of `text` (valid UTF-8), appended to `words` (none for empty text).
  absl::Status Run(absl::string_view text, std::vector<std::string>* words) const;

 private:
  enum class Kind { kSplit, kByteLevel };
  struct Step {
    Kind kind;
    Pcre2Regex pattern;  // kSplit: the split pattern; kByteLevel: GPT-2's (used if use_regex)
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
    bool use_regex = false;
  };

  absl::Status SplitPiece(const Pcre2Regex& pattern, SplitBehavior behavior, bool invert,
                          absl::string_view piece, std::vector<std::string>* out) const;

  std::vector<Step> steps_;
};

}  // namespace ditserve::tokenizers
