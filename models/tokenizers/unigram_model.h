// SentencePiece's unigram segmentation (what libsentencepiece's Encode does after normalising):
// the Viterbi best path over the normalised text, where each vocabulary piece scores its log
// probability, a user-defined symbol scores length * max_score - 0.1, and a character that no
// single piece covers becomes <unk> with score min_score - 10. Equal scores keep the path found
// first (shorter pieces starting earlier). Consecutive <unk>s are merged into one, as
// libsentencepiece (and the Hugging Face Unigram model) do. Torch-free.
//
// Thread-safety: immutable after Create(); Encode() may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/spm_model_proto.h"

namespace ditserve::tokenizers {

class UnigramModel {
 public:
  // Errors (naming `file`): empty or duplicate pieces, no or several <unk> pieces.
  static absl::StatusOr<UnigramModel> Create(const SpmModelProto& model, const std::string& file);

  // Appends the ids of normalised text (the output of SpmNormalizer) to `out`.
  void Encode(absl::string_view normalized, std::vector<int64_t>* out) const;

  // Id of any piece (control pieces included), if present.
  std::optional<int64_t> PieceToId(absl::string_view piece) const;
  const std::string& IdToPiece(int64_t id) const { return pieces_[id].piece; }
  size_t size() const { return pieces_.size(); }
  int64_t unk_id() const { return unk_id_; }

 private:
  static constexpr int32_t kNoPiece = -1;
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<SpmModelProto::Piece> pieces_;
  absl::flat_hash_map<std::string, int64_t> ids_;
  // Byte trie over the pieces that take part in segmentation (normal, user-defined, unused):
  // edges keyed by (node << 8 | byte), and the piece id ending at each node.
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> node_piece_;
  int64_t unk_id_ = -1;
  float min_score_ = 0.0f;
  float max_score_ = 0.0f;
};

}  // namespace ditserve::tokenizers
