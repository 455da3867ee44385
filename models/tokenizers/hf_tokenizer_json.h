// Reads a Hugging Face tokenizer.json (the `tokenizers` library's serialised Tokenizer, version
// "1.0") into HfTokenizer::Parts. Torch-free.
//
// Supported components (anything else is refused, naming its type and where it is):
//   normalizer      null, NFC, Lowercase, Replace, Sequence of those
//   pre_tokenizer   null, Split (pattern {"Regex": ...} read from the file, or {"String": ...};
//                   any behavior; invert), ByteLevel (add_prefix_space, use_regex), Sequence
//   model           BPE: vocab, merges as "a b" strings or [a, b] pairs, unk_token,
//                   continuing_subword_prefix, end_of_word_suffix, fuse_unk, byte_fallback,
//                   ignore_merges; dropout null or 0 (random dropout is refused)
//   added_tokens    id, content, single_word, lstrip, rstrip, normalized, special
//   post_processor  null, ByteLevel, TemplateProcessing ("single" template, special_tokens),
//                   RobertaProcessing / BertProcessing (cls, sep), Sequence of those
// "decoder" is not read (decoding is not provided); "truncation" and "padding" are not applied
// (transformers overrides them per call; HfEncodeOptions carries the call's values).
//
// Errors are INVALID_ARGUMENT "<path>: <JSON field>: <problem>", e.g.
// "/m/tokenizer/tokenizer.json: model.merges[12]: expected \"left right\" or [left, right]".
//
// The returned Parts' added vocabulary holds the file's added_tokens and is not Finish()ed (the
// loader adds tokenizer_config.json's tokens first); `special` and model_max_length are unset.
// Stateless; safe to call from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizers/hf_tokenizer.h"

namespace ditserve::tokenizers {

absl::StatusOr<HfTokenizer::Parts> ReadHfTokenizerJson(const std::string& path);
// What ReadHfTokenizerJson does with the file's text; `path` names the file in messages (and is
// the Parts' source).
absl::StatusOr<HfTokenizer::Parts> ParseHfTokenizerJson(const std::string& text,
                                                        const std::string& path);

}  // namespace ditserve::tokenizers
