#include "models/tokenizers/hf_added_vocabulary.h"

#include <algorithm>

#include "common/status_macros.h"

namespace ditserve::tokenizers {

void HfAddedVocabulary::Put(int64_t id, const HfAddedToken& token) {
  by_content_[token.content] = id;
  auto it = index_of_id_.find(id);
  if (it == index_of_id_.end()) {
    index_of_id_[id] = by_id_.size();
    by_id_.emplace_back(id, token);
  } else {
    by_id_[it->second].second = token;  // the reference's id -> token map keeps the latest
  }
}

std::vector<int64_t> HfAddedVocabulary::Add(const std::vector<HfAddedToken>& tokens,
                                            const BpeModel& model) {
  const int64_t vocab_size = static_cast<int64_t>(model.vocab_size());
  int64_t next_id = vocab_size;
  if (!by_id_.empty()) {
    int64_t max_id = -1;
    for (const auto& entry : by_id_) max_id = std::max(max_id, entry.first);
    if (max_id >= vocab_size || vocab_size == 0) next_id = max_id + 1;
  }
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const HfAddedToken& token : tokens) {
    if (token.content.empty()) {
      ids.push_back(-1);
      continue;
    }
    int64_t id;
    if (auto added = TokenToId(token.content)) {
      id = *added;
    } else if (auto in_model = model.TokenToId(token.content)) {
      id = *in_model;
    } else {
      id = next_id++;
    }
    Put(id, token);
    ids.push_back(id);
  }
  return ids;
}

void HfAddedVocabulary::AddWithIds(const std::vector<std::pair<int64_t, HfAddedToken>>& tokens) {
  for (const auto& [id, token] : tokens) {
    if (!token.content.empty()) Put(id, token);
  }
}

absl::Status HfAddedVocabulary::Finish(const HfNormalizer& normalizer) {
  std::vector<AddedTokens::Token> raw;
  std::vector<AddedTokens::Token> normalized;
  for (const auto& [id, token] : by_id_) {
    AddedTokens::Token matcher{token.content, id, token.single_word, token.lstrip, token.rstrip};
    if (token.normalized) {
      ASSIGN_OR_RETURN(matcher.content, normalizer.Normalize(token.content));
      normalized.push_back(std::move(matcher));
    } else {
      raw.push_back(std::move(matcher));
    }
  }
  raw_ = AddedTokens::WithFlags(std::move(raw));
  normalized_ = AddedTokens::WithFlags(std::move(normalized));
  return absl::OkStatus();
}

std::optional<int64_t> HfAddedVocabulary::TokenToId(absl::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ditserve::tokenizers
