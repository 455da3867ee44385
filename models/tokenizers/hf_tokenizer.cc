#include "models/tokenizers/hf_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode_text.h"

namespace ditserve::tokenizers {

HfTokenizer::HfTokenizer(Parts parts) : parts_(std::move(parts)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

absl::Status HfTokenizer::TokenizePlain(absl::string_view text, std::vector<int64_t>* ids) const {
  absl::string_view normalized_view = text;
  std::string normalized;
  if (!parts_.normalizer.empty()) {
    ASSIGN_OR_RETURN(normalized, parts_.normalizer.Normalize(text));
    normalized_view = normalized;
  }
  std::vector<std::string> words;
  for (const AddedTokens::Piece& piece : parts_.added.normalized_matcher().Split(normalized_view)) {
    if (piece.id >= 0) {
      ids->push_back(piece.id);
      continue;
    }
    words.clear();
    RETURN_IF_ERROR(parts_.pre_tokenizer.Run(piece.text, &words));
    for (const std::string& word : words) parts_.model.EncodeWord(word, ids);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> HfTokenizer::Tokenize(absl::string_view text) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  std::vector<int64_t> ids;
  for (const AddedTokens::Piece& piece : parts_.added.raw_matcher().Split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
    } else {
      RETURN_IF_ERROR(TokenizePlain(piece.text, &ids));
    }
  }
  return ids;
}

absl::StatusOr<HfEncoding> HfTokenizer::Encode(absl::string_view text,
                                               const HfEncodeOptions& options) const {
  if ((options.truncation || options.pad_to_max_length) && !options.max_length) {
    return absl::InvalidArgumentError("truncation and padding to max_length need a max_length");
  }
  if (options.max_length && *options.max_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_length ", *options.max_length, " is negative"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> content, Tokenize(text));

  if (options.truncation) {
    const size_t added = options.add_special_tokens ? num_special_tokens_to_add() : 0;
    const size_t max_length = static_cast<size_t>(*options.max_length);
    if (max_length < added) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_length ", max_length, " leaves no room for the ", added,
          " special tokens the tokenizer adds"));
    }
    const size_t limit = max_length - added;
    if (content.size() > limit) {
      if (options.truncation_side == Side::kRight) {
        content.resize(limit);
      } else {
        content.erase(content.begin(), content.end() - static_cast<std::ptrdiff_t>(limit));
      }
    }
  }

  HfEncoding encoding;
  encoding.ids = parts_.post_processor.Apply(content, options.add_special_tokens);
  encoding.attention_mask.assign(encoding.ids.size(), 1);

  if (options.pad_to_max_length) {
    const size_t length = static_cast<size_t>(*options.max_length);
    if (encoding.ids.size() < length) {
      const std::optional<int64_t> pad = options.pad_id ? options.pad_id : pad_id();
      if (!pad) {
        return absl::InvalidArgumentError(
            absl::StrCat(parts_.source, ": padding asked for, but the tokenizer has no pad token"));
      }
      const size_t missing = length - encoding.ids.size();
      if (options.padding_side == Side::kRight) {
        encoding.ids.insert(encoding.ids.end(), missing, *pad);
        encoding.attention_mask.insert(encoding.attention_mask.end(), missing, 0);
      } else {
        encoding.ids.insert(encoding.ids.begin(), missing, *pad);
        encoding.attention_mask.insert(encoding.attention_mask.begin(), missing, 0);
      }
    }
  }
  return encoding;
}

std::optional<int64_t> HfTokenizer::TokenToId(absl::string_view token) const {
  if (auto id = parts_.added.TokenToId(token)) return id;
  return parts_.model.TokenToId(token);
}

}  // namespace ditserve::tokenizers
