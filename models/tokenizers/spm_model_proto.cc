#include "models/tokenizers/spm_model_proto.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::tokenizers {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

class WireReader {
 public:
  WireReader(absl::string_view data, const std::string& file) : data_(data), file_(file) {}

  bool done() const { return pos_ >= data_.size(); }

  absl::StatusOr<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return Error("truncated varint");
      const uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return Error("varint longer than 10 bytes");
  }

  // Reads a field key; returns (field number, wire type).
  absl::StatusOr<std::pair<uint32_t, int>> Key() {
    ASSIGN_OR_RETURN(const uint64_t key, Varint());
    if ((key >> 3) == 0 || (key >> 3) > UINT32_MAX) return Error("bad field number");
    return std::make_pair(static_cast<uint32_t>(key >> 3), static_cast<int>(key & 7));
  }

  absl::StatusOr<absl::string_view> Bytes() {
    ASSIGN_OR_RETURN(const uint64_t length, Varint());
    if (length > data_.size() - pos_) return Error("length-delimited field past the end");
    const absl::string_view out = data_.substr(pos_, length);
    pos_ += length;
    return out;
  }

  absl::StatusOr<float> Float() {
    if (data_.size() - pos_ < 4) return Error("truncated fixed32");
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += 4;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }

  absl::Status Skip(int wire_type) {
    switch (wire_type) {
      case kVarint:
        return Varint().status();
      case kFixed64:
        if (data_.size() - pos_ < 8) return Error("truncated fixed64");
        pos_ += 8;
        return absl::OkStatus();
      case kLengthDelimited:
        return Bytes().status();
      case kFixed32:
        if (data_.size() - pos_ < 4) return Error("truncated fixed32");
        pos_ += 4;
        return absl::OkStatus();
      default:
        return Error(absl::StrCat("unsupported wire type ", wire_type));
    }
  }

  absl::Status Expect(int wire_type, int expected, uint32_t field) {
    if (wire_type == expected) return absl::OkStatus();
    return Error(absl::StrCat("field ", field, " has wire type ", wire_type));
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": not a SentencePiece model (", what, " at byte ", pos_, ")"));
  }

 private:
  absl::string_view data_;
  const std::string& file_;
  size_t pos_ = 0;
};

absl::Status ParsePiece(absl::string_view bytes, const std::string& file, SpmModelProto::Piece* out) {
  WireReader in(bytes, file);
  while (!in.done()) {
    ASSIGN_OR_RETURN(const auto key, in.Key());
    const auto [field, wire] = key;
    if (field == 1) {
      RETURN_IF_ERROR(in.Expect(wire, kLengthDelimited, field));
      ASSIGN_OR_RETURN(const absl::string_view piece, in.Bytes());
      out->piece = std::string(piece);
    } else if (field == 2) {
      RETURN_IF_ERROR(in.Expect(wire, kFixed32, field));
      ASSIGN_OR_RETURN(out->score, in.Float());
    } else if (field == 3) {
      RETURN_IF_ERROR(in.Expect(wire, kVarint, field));
      ASSIGN_OR_RETURN(const uint64_t type, in.Varint());
      if (type < 1 || type > 6) return in.Error(absl::StrCat("unknown piece type ", type));
      out->type = static_cast<SpmModelProto::PieceType>(type);
    } else {
      RETURN_IF_ERROR(in.Skip(wire));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(absl::string_view bytes, const std::string& file, SpmModelProto* out) {
  WireReader in(bytes, file);
  while (!in.done()) {
    ASSIGN_OR_RETURN(const auto key, in.Key());
    const auto [field, wire] = key;
    if (field == 3 || field == 24 || field == 35) {
      RETURN_IF_ERROR(in.Expect(wire, kVarint, field));
      ASSIGN_OR_RETURN(const uint64_t value, in.Varint());
      if (field == 3) out->model_type = static_cast<int>(value);
      if (field == 24) out->treat_whitespace_as_suffix = value != 0;
      if (field == 35) out->byte_fallback = value != 0;
    } else {
      RETURN_IF_ERROR(in.Skip(wire));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(absl::string_view bytes, const std::string& file,
                                 SpmModelProto* out) {
  WireReader in(bytes, file);
  while (!in.done()) {
    ASSIGN_OR_RETURN(const auto key, in.Key());
    const auto [field, wire] = key;
    if (field == 1 || field == 2 || field == 6) {
      RETURN_IF_ERROR(in.Expect(wire, kLengthDelimited, field));
      ASSIGN_OR_RETURN(const absl::string_view value, in.Bytes());
      if (field == 1) out->normalizer_name = std::string(value);
      if (field == 2) out->precompiled_charsmap = std::string(value);
      if (field == 6) out->has_normalization_rule_tsv = !value.empty();
    } else if (field >= 3 && field <= 5) {
      RETURN_IF_ERROR(in.Expect(wire, kVarint, field));
      ASSIGN_OR_RETURN(const uint64_t value, in.Varint());
      if (field == 3) out->add_dummy_prefix = value != 0;
      if (field == 4) out->remove_extra_whitespaces = value != 0;
      if (field == 5) out->escape_whitespaces = value != 0;
    } else {
      RETURN_IF_ERROR(in.Skip(wire));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SpmModelProto> ParseSpmModelProto(absl::string_view bytes, const std::string& file) {
  SpmModelProto model;
  WireReader in(bytes, file);
  while (!in.done()) {
    ASSIGN_OR_RETURN(const auto key, in.Key());
    const auto [field, wire] = key;
    if (field >= 1 && field <= 3) {
      RETURN_IF_ERROR(in.Expect(wire, kLengthDelimited, field));
      ASSIGN_OR_RETURN(const absl::string_view message, in.Bytes());
      if (field == 1) {
        SpmModelProto::Piece piece;
        RETURN_IF_ERROR(ParsePiece(message, file, &piece));
        model.pieces.push_back(std::move(piece));
      } else if (field == 2) {
        RETURN_IF_ERROR(ParseTrainerSpec(message, file, &model));
      } else {
        RETURN_IF_ERROR(ParseNormalizerSpec(message, file, &model));
      }
    } else {
      RETURN_IF_ERROR(in.Skip(wire));
    }
  }
  if (model.pieces.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": SentencePiece model without pieces"));
  }
  return model;
}

}  // namespace ditserve::tokenizers
