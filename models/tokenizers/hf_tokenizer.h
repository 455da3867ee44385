// A Hugging Face "fast" tokenizer (the `tokenizers` library's Tokenizer, i.e. what tokenizer.json
// describes) for byte-level BPE models: FLUX.2's Mistral tokenizer, Qwen-Image's Qwen2 tokenizer,
// and other tokenizer.json files built from the same parts. Id-for-id equal to transformers'
// tokenizer(text).input_ids on those files. Torch-free.
//
// Load it with LoadHfTokenizer(dir) (hf_tokenizer_loader.h), which reads tokenizer.json
// (hf_tokenizer_json.h) or, without one, the slow Qwen2 files (qwen2_slow_tokenizer.h).
//
// Encode(text, options), as tokenizers' encode + transformers' call arguments:
//   1. added tokens (hf_added_vocabulary.h) with normalized = false are cut out of the raw text;
//   2. each remaining piece is normalised (hf_normalizer.h), and added tokens with
//      normalized = true are cut out of the result;
//   3. each remaining piece is pre-tokenised into words (hf_pre_tokenizer.h: Split regexes run
//      with PCRE2, ByteLevel) and each word encoded by the BPE model (bpe_model.h);
//   4. with truncation and a max_length, the ids are cut to max_length minus the special tokens
//      the post-processor adds (on the right, or the left), then the post-processor's special
//      tokens are added (add_special_tokens; hf_post_processor.h), then, with
//      pad_to_max_length, pad ids fill up to max_length on the right or the left (attention mask
//      0 there, 1 elsewhere).
// Text must be valid UTF-8 (INVALID_ARGUMENT otherwise; gRPC string fields always are).
// tokenizer.json's "truncation" and "padding" are not applied: transformers replaces them on every
// call with the call's own arguments, which HfEncodeOptions carries. Decoding is not provided.
//
// Ownership: owns its tables. Thread-safety: immutable after construction except for the BPE word
// cache, which is mutex-guarded, so Encode() may be called concurrently. Movable, not copyable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/bpe_model.h"
#include "models/tokenizers/hf_added_vocabulary.h"
#include "models/tokenizers/hf_normalizer.h"
#include "models/tokenizers/hf_post_processor.h"
#include "models/tokenizers/hf_pre_tokenizer.h"

namespace ditserve::tokenizers {

enum class Side { kRight, kLeft };

struct HfEncodeOptions {
  bool add_special_tokens = true;
  std::optional<int> max_length;  // used by truncation and pad_to_max_length
  bool truncation = false;        // transformers' truncation=True (needs max_length)
  Side truncation_side = Side::kRight;
  bool pad_to_max_length = false;  // transformers' padding="max_length" (needs max_length)
  Side padding_side = Side::kRight;
  std::optional<int64_t> pad_id;  // default: the tokenizer's pad token (pad_id())
};

struct HfEncoding {
  std::vector<int64_t> ids;
  std::vector<int64_t> attention_mask;  // 1 for tokens, 0 for padding; same length as ids
};

// The special tokens of tokenizer_config.json (or the slow class's defaults), resolved to ids.
struct HfSpecialTokens {
  std::optional<int64_t> bos_id;
  std::optional<int64_t> eos_id;
  std::optional<int64_t> pad_id;
  std::optional<int64_t> unk_id;
};

class HfTokenizer {
 public:
  // What the loaders assemble. `added` must be Finish()ed with `normalizer`.
  struct Parts {
    explicit Parts(BpeModel bpe) : model(std::move(bpe)) {}

    HfNormalizer normalizer;
    HfPreTokenizer pre_tokenizer;
    BpeModel model;
    HfAddedVocabulary added;
    HfPostProcessor post_processor;
    HfSpecialTokens special;
    std::optional<int64_t> model_max_length;
    std::string source;  // the file(s) it was read from, for messages
  };

  explicit HfTokenizer(Parts parts);
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  // Errors: INVALID_ARGUMENT for text that is not UTF-8, for truncation with a max_length below
  // the number of special tokens, for padding without a pad id, or for truncation / padding
  // without a max_length (or with a negative one); RESOURCE_EXHAUSTED if a regex hits PCRE2's
  // match limits.
  absl::StatusOr<HfEncoding> Encode(absl::string_view text,
                                    const HfEncodeOptions& options = {}) const;
  // The ids of `text` alone: steps 1 to 3, no special tokens, no truncation or padding.
  absl::StatusOr<std::vector<int64_t>> Tokenize(absl::string_view text) const;

  // An added token's id, else a model vocabulary entry's (byte-level spelling, e.g. "Ġcat").
  std::optional<int64_t> TokenToId(absl::string_view token) const;
  // Special tokens added by Encode with add_special_tokens.
  size_t num_special_tokens_to_add() const { return parts_.post_processor.added_tokens(); }

  std::optional<int64_t> bos_id() const { return parts_.special.bos_id; }
  std::optional<int64_t> eos_id() const { return parts_.special.eos_id; }
  std::optional<int64_t> pad_id() const { return parts_.special.pad_id; }
  std::optional<int64_t> unk_id() const { return parts_.special.unk_id; }
  // tokenizer_config.json's model_max_length, when set to a real limit.
  std::optional<int64_t> model_max_length() const { return parts_.model_max_length; }
  size_t vocab_size() const { return parts_.model.vocab_size(); }
  const std::string& source() const { return parts_.source; }

 private:
  absl::Status TokenizePlain(absl::string_view text, std::vector<int64_t>* ids) const;

  Parts parts_;
};

}  // namespace ditserve::tokenizers
