// Reads a SentencePiece model file (spiece.model, a serialized sentencepiece.ModelProto) with a
// small protobuf wire-format reader of its own. Torch-free, protobuf-free.
//
// Why not libsentencepiece: Debian's libsentencepiece.so.0 carries its own protobuf-lite runtime
// and exports it; loaded next to libprotobuf.so.32 (gRPC, LibTorch) the two interpose and the
// process crashes during static initialisation. Only the fields the encoder needs are read (field
// numbers from sentencepiece_model.proto); unknown fields are skipped.
//
// Stateless function; safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

struct SpmModelProto {
  // ModelProto.SentencePiece.Type
  enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
                         kByte = 6 };
  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = PieceType::kNormal;
  };
  std::vector<Piece> pieces;  // id = index

  // TrainerSpec
  int model_type = 1;  // 1 = UNIGRAM, 2 = BPE, 3 = WORD, 4 = CHAR
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;

  // NormalizerSpec
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool has_normalization_rule_tsv = false;
};

// Parses serialized ModelProto bytes. `file` is used in error messages only.
absl::StatusOr<SpmModelProto> ParseSpmModelProto(absl::string_view bytes, const std::string& file);

}  // namespace ditserve::tokenizers
