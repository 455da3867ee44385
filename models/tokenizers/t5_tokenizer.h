// The T5 tokenizer (FLUX.1 `tokenizer_2/`), id-for-id equal to transformers' T5TokenizerFast.
// The SentencePiece model (spiece.model) is read and run by our own code (spm_model_proto.h,
// spm_normalizer.h, unigram_model.h), which reproduces libsentencepiece's Encode; the library itself
// cannot be linked into a process that also loads libprotobuf (see spm_model_proto.h). Torch-free.
//
// Encode(text, max_length, pad):
//   1. Special tokens (</s>, <pad>, <unk>, <extra_id_N>, ...) are found in the raw text and become
//      their ids directly; each stretch of text in between is normalised and segmented on its own,
//      with its own word-initial "▁" (the fast tokenizer splits added tokens out before
//      normalisation, and its Metaspace pre-tokenizer prepends "▁" to every word: "always").
//   2. The ids are cut to max_length - 1, then </s> is appended (so a truncated sequence still ends
//      in </s>), then, if `pad`, <pad> ids fill it to exactly max_length.
//
// Files read from the tokenizer folder: spiece.model (required); tokenizer_config.json (optional:
// special tokens, extra_ids, model_max_length); tokenizer.json (optional: its "added_tokens" list
// is the authoritative special-token table when present, and its unigram vocabulary is checked
// against spiece.model). Without tokenizer.json the special tokens are the config's, with
// <extra_id_N> at id piece_count + extra_ids - 1 - N, transformers' T5 convention. Errors name the
// file.
//
// Ownership: owns its tables. Thread-safety: immutable after Load(); Encode*() may be called
// concurrently from any number of threads. Movable, not copyable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/added_tokens.h"
#include "models/tokenizers/spm_normalizer.h"
#include "models/tokenizers/unigram_model.h"

namespace ditserve::tokenizers {

class T5Tokenizer {
 public:
  static absl::StatusOr<T5Tokenizer> Load(const std::string& tokenizer_dir);

  T5Tokenizer(T5Tokenizer&&) noexcept;
  T5Tokenizer& operator=(T5Tokenizer&&) noexcept;
  ~T5Tokenizer();

  // Tokens cut to max_length - 1, then </s>; with `pad`, padded with <pad> to exactly max_length.
  // A max_length below 1 is treated as 1.
  std::vector<int64_t> Encode(absl::string_view text, int max_length, bool pad) const;
  // Every token, then </s>: no truncation, no padding.
  std::vector<int64_t> EncodeUnpadded(absl::string_view text) const;
  // The tokens alone (no </s>).
  std::vector<int64_t> Tokenize(absl::string_view text) const;

  int64_t eos_id() const { return eos_id_; }
  int64_t pad_id() const { return pad_id_; }
  int64_t unk_id() const { return unk_id_; }
  // tokenizer_config.json's model_max_length, or 512.
  int model_max_length() const { return model_max_length_; }
  // SentencePiece pieces plus added tokens beyond them.
  size_t vocab_size() const { return vocab_size_; }

 private:
  T5Tokenizer();

  SpmNormalizer normalizer_;
  UnigramModel unigram_;
  AddedTokens added_;
  int64_t eos_id_ = 1;
  int64_t pad_id_ = 0;
  int64_t unk_id_ = 2;
  int model_max_length_ = 512;
  size_t vocab_size_ = 0;
};

}  // namespace ditserve::tokenizers
