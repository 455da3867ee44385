// Test oracle: a thin wrapper around libsentencepiece's SentencePieceProcessor, to cross-check our
// own SentencePiece encoder (models/tokenizers/unigram_model.h) against the real library. Link it
// only into test binaries that do not load libprotobuf (LibTorch, gRPC): Debian's libsentencepiece
// exports a bundled protobuf runtime that clashes with it.
//
// Why a wrapper: sentencepiece_processor.h (0.1.97) declares `namespace absl { using
// std::string_view; }`, which clashes with Debian Abseil's own absl::string_view class. So the
// library is only ever included by tokenizer_spm_oracle.cc, which includes no Abseil header, and this
// header uses std types only.
//
// Ownership: owns the processor. Thread-safety: immutable after Load(); EncodeAsIds() is const and
// may be called concurrently (SentencePieceProcessor::Encode keeps no mutable state).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ditserve::tokenizers::testing {

class SentencePieceModel {
 public:
  // Loads a serialized ModelProto (spiece.model). On failure returns null and sets *error to a
  // message that names `path`.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  // Normalises (the model's own rules: charsmap, extra-whitespace removal, dummy prefix) and
  // encodes; no control tokens are added.
  std::vector<int> EncodeAsIds(std::string_view text) const;

  int PieceSize() const;
  // The piece text of `id` (empty when out of range).
  std::string IdToPiece(int id) const;
  // The id of `piece`, or -1 when the model does not have it (sentencepiece answers unk_id).
  int PieceToId(std::string_view piece) const;
  int unk_id() const;
  int eos_id() const;
  int pad_id() const;

 private:
  SentencePieceModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace ditserve::tokenizers::testing
