// SentencePiece's text normaliser, as libsentencepiece applies it before encoding:
//   * user-defined symbols are copied as they are (longest match first);
//   * otherwise the longest prefix found in the precompiled character map (a darts-clone double-array
//     trie + NUL-terminated replacement strings, e.g. T5's "nmt_nfkc") is replaced; other
//     characters are copied, malformed UTF-8 bytes become U+FFFD one byte at a time;
//   * with remove_extra_whitespaces: leading and trailing spaces dropped, runs of spaces collapsed;
//   * with add_dummy_prefix: one space in front; with escape_whitespaces: ' ' written as U+2581 "▁".
// Torch-free.
//
// Thread-safety: immutable after Create(); Normalize() may be called concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/spm_model_proto.h"

namespace ditserve::tokenizers {

class SpmNormalizer {
 public:
  // Validates the character map; `file` is named in errors.
  static absl::StatusOr<SpmNormalizer> Create(const SpmModelProto& model, const std::string& file);

  std::string Normalize(absl::string_view input) const;

 private:
  // The replacement for the longest rule or symbol matching a prefix of `input`, and how many
  // input bytes it consumes (> 0 for non-empty input).
  std::pair<absl::string_view, size_t> NormalizePrefix(absl::string_view input) const;
  // Length of the longest key of the trie that prefixes `input` (0 if none); sets *value.
  size_t LongestRule(absl::string_view input, uint32_t* value) const;

  std::vector<uint32_t> units_;       // double-array units
  std::string replacements_;          // NUL-separated replacement strings
  std::vector<std::string> user_defined_;  // longest first
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
};

// Length of the well-formed UTF-8 character at the start of `input` (1..4), or 0 if malformed
// (overlong forms, surrogates and code points above U+10FFFF are malformed). `input` non-empty.
size_t ValidUtf8Length(absl::string_view input);

}  // namespace ditserve::tokenizers
