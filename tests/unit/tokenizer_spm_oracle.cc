// NOTE: no Abseil header may be included in this file (see tokenizer_spm_oracle.h).
#include "tests/unit/tokenizer_spm_oracle.h"

#include <sentencepiece_processor.h>

namespace ditserve::tokenizers::testing {

SentencePieceModel::SentencePieceModel()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  const sentencepiece::util::Status status = model->processor_->Load(path);
  if (!status.ok()) {
    *error = path + ": not a SentencePiece model: " + status.ToString();
    return nullptr;
  }
  if (model->processor_->GetPieceSize() <= 0) {
    *error = path + ": SentencePiece model without pieces";
    return nullptr;
  }
  return model;
}

std::vector<int> SentencePieceModel::EncodeAsIds(std::string_view text) const {
  std::vector<int> ids;
  if (!processor_->Encode(text, &ids).ok()) ids.clear();  // fails only on an unloaded model
  return ids;
}

int SentencePieceModel::PieceSize() const { return processor_->GetPieceSize(); }

std::string SentencePieceModel::IdToPiece(int id) const {
  if (id < 0 || id >= processor_->GetPieceSize()) return std::string();
  return processor_->IdToPiece(id);
}

int SentencePieceModel::PieceToId(std::string_view piece) const {
  const int id = processor_->PieceToId(piece);
  if (id == processor_->unk_id() && processor_->IdToPiece(id) != piece) return -1;
  return id;
}

int SentencePieceModel::unk_id() const { return processor_->unk_id(); }
int SentencePieceModel::eos_id() const { return processor_->eos_id(); }
int SentencePieceModel::pad_id() const { return processor_->pad_id(); }

}  // namespace ditserve::tokenizers::testing
