// The CLIP text tokenizer (FLUX.1 `tokenizer/`), id-for-id equal to transformers' CLIPTokenizer
// (tokenizers backend, i.e. what CLIPTokenizerFast / tokenizer.json compute). Torch-free.
//
// Encode(text):
//   1. Special tokens (<|startoftext|>, <|endoftext|>, and any other special/added token named in
//      tokenizer_config.json) are found in the raw text and become their ids directly.
//   2. Each stretch of text in between is normalised (clip_normalizer.h: NFC, whitespace runs to
//      ' ', lower case) and split with CLIP's pattern
//        <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//      keeping the matches (whitespace is dropped); each match is split again with the GPT-2
//      byte-level pattern, mapped to byte-level characters (byte_level.h) and run through the BPE
//      model with the "</w>" end-of-word suffix (bpe_model.h).
//   3. <|startoftext|> + ids + <|endoftext|>; with a max_length, the ids are first cut to
//      max_length - 2 (the end token is always kept) and the result is padded with the pad token
//      (<|endoftext|>) to exactly max_length, as `padding="max_length", truncation=True` does.
//
// Files read from the tokenizer folder: vocab.json, merges.txt (required), tokenizer_config.json
// (optional: bos/eos/pad/unk tokens, model_max_length, added tokens). Errors name the file.
//
// Ownership: owns its tables. Thread-safety: after Load() the object is immutable except for the
// BPE word cache, which is mutex-guarded, so Encode*() may be called concurrently from any number
// of threads. Movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/added_tokens.h"
#include "models/tokenizers/bpe_model.h"

namespace re2 {
class RE2;
}

namespace ditserve::tokenizers {

class ClipTokenizer {
 public:
  static constexpr int kDefaultMaxLength = 77;

  static absl::StatusOr<ClipTokenizer> Load(const std::string& tokenizer_dir);

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // Exactly `max_length` ids: start, tokens (cut to max_length - 2), end, padding. A max_length
  // below 2 is treated as 2.
  std::vector<int64_t> Encode(absl::string_view text, int max_length = kDefaultMaxLength) const;
  // Start, every token, end: no truncation, no padding.
  std::vector<int64_t> EncodeUnpadded(absl::string_view text) const;
  // The tokens alone (no start/end tokens).
  std::vector<int64_t> Tokenize(absl::string_view text) const;

  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }
  int64_t pad_id() const { return pad_id_; }
  // tokenizer_config.json's model_max_length, or 77.
  int model_max_length() const { return model_max_length_; }
  size_t vocab_size() const { return bpe_.vocab_size(); }
  // The id of a vocabulary entry (byte-level characters, e.g. "cat</w>"), if present.
  std::optional<int64_t> TokenToId(absl::string_view token) const { return bpe_.TokenToId(token); }

 private:
  ClipTokenizer(BpeModel bpe);
  void TokenizePlain(absl::string_view text, std::vector<int64_t>* out) const;

  BpeModel bpe_;
  AddedTokens added_;
  std::unique_ptr<re2::RE2> clip_split_;
  std::unique_ptr<re2::RE2> byte_level_split_;
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  int64_t pad_id_ = -1;
  int model_max_length_ = kDefaultMaxLength;
};

}  // namespace ditserve::tokenizers
