// The single-sequence part of a Hugging Face tokenizer.json "post_processor": where special tokens
// go around the ids of one text when add_special_tokens is set (tokenizers' processors/). Built by
// the tokenizer.json reader from TemplateProcessing ("single" template), RobertaProcessing /
// BertProcessing (cls, sequence, sep), ByteLevel and null (nothing added), and Sequence (each
// processor applied to the previous one's output). Torch-free.
//
// Thread-safety: immutable value type; any thread may use a const one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ditserve::tokenizers {

class HfPostProcessor {
 public:
  // One piece of a template: the sequence's ids, or fixed special ids.
  struct Piece {
    bool is_sequence = false;
    std::vector<int64_t> ids;  // special ids (empty for the sequence)
  };

  // Adds nothing (null / ByteLevel).
  HfPostProcessor() : pieces_({Piece{true, {}}}) {}
  explicit HfPostProcessor(std::vector<Piece> pieces);

  // This processor, then `next` applied to its output (a "Sequence" of processors).
  HfPostProcessor Then(const HfPostProcessor& next) const;

  // Number of special ids added to one sequence (what truncation reserves).
  size_t added_tokens() const;

  // `content` with the special ids around it; without add_special_tokens, `content` alone.
  std::vector<int64_t> Apply(const std::vector<int64_t>& content, bool add_special_tokens) const;

 private:
  std::vector<Piece> pieces_;
};

}  // namespace ditserve::tokenizers
