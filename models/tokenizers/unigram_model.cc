#include "models/tokenizers/unigram_model.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ditserve::tokenizers {
namespace {

using PieceType = SpmModelProto::PieceType;

constexpr float kUnkPenalty = 10.0f;

// Bytes of the UTF-8 character led by `lead`, by its high nibble (1 for stray bytes), as
// libsentencepiece steps through text.
size_t OneCharLength(unsigned char lead) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[lead >> 4];
}

}  // namespace

absl::StatusOr<UnigramModel> UnigramModel::Create(const SpmModelProto& model,
                                                  const std::string& file) {
  UnigramModel out;
  out.pieces_ = model.pieces;
  out.node_piece_.push_back(kNoPiece);  // the root
  // libsentencepiece starts max_score at FLT_MIN (the smallest positive float), not -FLT_MAX.
  out.min_score_ = std::numeric_limits<float>::max();
  out.max_score_ = std::numeric_limits<float>::min();
  for (size_t id = 0; id < out.pieces_.size(); ++id) {
    const SpmModelProto::Piece& piece = out.pieces_[id];
    if (piece.piece.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": piece ", id, " is empty"));
    }
    if (!out.ids_.emplace(piece.piece, static_cast<int64_t>(id)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": piece \"", piece.piece, "\" is defined twice"));
    }
    if (piece.type == PieceType::kUnknown) {
      if (out.unk_id_ >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": more than one <unk> piece"));
      }
      out.unk_id_ = static_cast<int64_t>(id);
    }
    if (piece.type == PieceType::kNormal) {
      out.min_score_ = std::min(out.min_score_, piece.score);
      out.max_score_ = std::max(out.max_score_, piece.score);
    }
    if (piece.type != PieceType::kNormal && piece.type != PieceType::kUserDefined &&
        piece.type != PieceType::kUnused) {
      continue;
    }
    int32_t node = 0;
    for (char c : piece.piece) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto [it, inserted] = out.edges_.emplace(key, static_cast<int32_t>(out.node_piece_.size()));
      if (inserted) out.node_piece_.push_back(kNoPiece);
      node = it->second;
    }
    out.node_piece_[node] = static_cast<int32_t>(id);
  }
  if (out.unk_id_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no <unk> piece"));
  }
  return out;
}

int32_t UnigramModel::Child(int32_t node, uint8_t byte) const {
  auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? kNoPiece : it->second;
}

std::optional<int64_t> UnigramModel::PieceToId(absl::string_view piece) const {
  auto it = ids_.find(piece);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void UnigramModel::Encode(absl::string_view normalized, std::vector<int64_t>* out) const {
  if (normalized.empty()) return;
  // best[e]: the best path covering normalized[0, e): its last piece, where that piece starts,
  // and its score. Only character boundaries are ever reached.
  struct Best {
    int64_t id = -1;
    float score = 0.0f;
    int64_t starts_at = -1;
  };
  const size_t size = normalized.size();
  const float unk_score = min_score_ - kUnkPenalty;
  std::vector<Best> best(size + 1);
  for (size_t start = 0; start < size;) {
    const float score_here = best[start].score;
    const size_t char_length =
        std::min(OneCharLength(static_cast<uint8_t>(normalized[start])), size - start);
    bool single_char_piece = false;
    int32_t node = 0;
    for (size_t end = start; end < size;) {
      node = Child(node, static_cast<uint8_t>(normalized[end]));
      ++end;
      if (node == kNoPiece) break;
      const int32_t id = node_piece_[node];
      if (id == kNoPiece || pieces_[id].type == PieceType::kUnused) continue;
      const size_t length = end - start;
      // A double, as in libsentencepiece (its user-defined branch is a double expression).
      const double piece_score = pieces_[id].type == PieceType::kUserDefined
                                     ? length * max_score_ - 0.1
                                     : pieces_[id].score;
      const double candidate = piece_score + score_here;
      Best& target = best[end];
      if (target.starts_at == -1 || candidate > target.score) {
        target.score = static_cast<float>(candidate);
        target.starts_at = static_cast<int64_t>(start);
        target.id = id;
      }
      if (length == char_length) single_char_piece = true;
    }
    if (!single_char_piece) {
      const float candidate = unk_score + score_here;
      Best& target = best[start + char_length];
      if (target.starts_at == -1 || candidate > target.score) {
        target.score = candidate;
        target.starts_at = static_cast<int64_t>(start);
        target.id = unk_id_;
      }
    }
    start += char_length;
  }
  std::vector<int64_t> reversed;
  for (int64_t end = static_cast<int64_t>(size); end > 0; end = best[end].starts_at) {
    reversed.push_back(best[end].id);
  }
  bool previous_unk = false;
  for (auto it = reversed.rbegin(); it != reversed.rend(); ++it) {
    const bool unk = *it == unk_id_;
    if (!(unk && previous_unk)) out->push_back(*it);
    previous_unk = unk;
  }
}

}  // namespace ditserve::tokenizers
