// The added vocabulary of a Hugging Face tokenizer (tokenizers' tokenizer/added_vocabulary.rs):
// tokens such as [INST] or <|im_start|> that are matched in the text before the model sees it.
//
// Ids: Add() follows AddedVocabulary::add_tokens: a content already added keeps its id, a content
// in the model's vocabulary takes that id, any other takes the next free id (the model vocabulary
// size, or one past the largest added id when that is larger), so tokenizer.json's own "id" fields
// are only a cross-check there, exactly as in the reference. AddWithIds() keeps given ids (the slow
// tokenizers' added_tokens_decoder).
//
// Matching (Finish()): tokens with normalized = false are matched in the raw text; those with
// normalized = true in the normalised text, by their normalised content. Both with the
// leftmost-longest rule and flags of added_tokens.h.
//
// Thread-safety: build on one thread; after Finish(), const use from any thread. Movable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/added_tokens.h"
#include "models/tokenizers/bpe_model.h"
#include "models/tokenizers/hf_normalizer.h"

namespace ditserve::tokenizers {

struct HfAddedToken {
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

class HfAddedVocabulary {
 public:
  HfAddedVocabulary() = default;
  HfAddedVocabulary(HfAddedVocabulary&&) noexcept = default;
  HfAddedVocabulary& operator=(HfAddedVocabulary&&) noexcept = default;

  // One add_tokens call of the reference; returns the id each token got (-1 for empty contents,
  // which are ignored).
  std::vector<int64_t> Add(const std::vector<HfAddedToken>& tokens, const BpeModel& model);
  // Tokens with fixed ids.
  void AddWithIds(const std::vector<std::pair<int64_t, HfAddedToken>>& tokens);

  // Builds the two matchers; the normalised contents come from `normalizer`.
  absl::Status Finish(const HfNormalizer& normalizer);

  std::optional<int64_t> TokenToId(absl::string_view content) const;
  size_t size() const { return by_content_.size(); }

  const AddedTokens& raw_matcher() const { return raw_; }
  const AddedTokens& normalized_matcher() const { return normalized_; }

 private:
  void Put(int64_t id, const HfAddedToken& token);

  absl::flat_hash_map<std::string, int64_t> by_content_;
  // In order of first insertion; a re-added id keeps its place and takes the latest flags.
  std::vector<std::pair<int64_t, HfAddedToken>> by_id_;
  absl::flat_hash_map<int64_t, size_t> index_of_id_;
  AddedTokens raw_;
  AddedTokens normalized_;
};

}  // namespace ditserve::tokenizers
