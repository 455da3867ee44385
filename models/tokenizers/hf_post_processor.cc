#include "models/tokenizers/hf_post_processor.h"

#include <utility>

namespace ditserve::tokenizers {

HfPostProcessor::HfPostProcessor(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

HfPostProcessor HfPostProcessor::Then(const HfPostProcessor& next) const {
  std::vector<Piece> composed;
  for (const Piece& outer : next.pieces_) {
    if (!outer.is_sequence) {
      composed.push_back(outer);
      continue;
    }
    composed.insert(composed.end(), pieces_.begin(), pieces_.end());
  }
  return HfPostProcessor(std::move(composed));
}

size_t HfPostProcessor::added_tokens() const {
  size_t added = 0;
  for (const Piece& piece : pieces_) added += piece.ids.size();
  return added;
}

std::vector<int64_t> HfPostProcessor::Apply(const std::vector<int64_t>& content,
                                            bool add_special_tokens) const {
  std::vector<int64_t> ids;
  ids.reserve(content.size() + added_tokens());
  for (const Piece& piece : pieces_) {
    if (piece.is_sequence) {
      ids.insert(ids.end(), content.begin(), content.end());
    } else if (add_special_tokens) {
      ids.insert(ids.end(), piece.ids.begin(), piece.ids.end());
    }
  }
  return ids;
}

}  // namespace ditserve::tokenizers
