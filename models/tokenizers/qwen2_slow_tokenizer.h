// The "slow" Qwen2 tokenizer format: a folder with vocab.json + merges.txt + tokenizer_config.json
// and no tokenizer.json, as transformers' Qwen2Tokenizer reads it, turned into the same
// HfTokenizer::Parts a tokenizer.json of that tokenizer gives. Torch-free.
//
// The parts are those transformers uses for Qwen2 (Qwen2Tokenizer / its tokenizers conversion):
//   normalizer     NFC (Qwen2Tokenizer.prepare_for_tokenization);
//   pre-tokenizer  Split with kQwen2PretokenizePattern (Isolated), then ByteLevel without prefix
//                  space or regex. The slow format has no place for the pattern, so it is the
//                  documented constant PRETOKENIZE_REGEX of transformers' tokenization_qwen2.py;
//   model          BPE over vocab.json / merges.txt, no unknown token, no prefix or suffix;
//   added tokens   tokenizer_config.json's added_tokens_decoder, with its ids and flags;
//   post-processor none (Qwen2 adds no special tokens).
// tokenizer_config.json's special tokens are added by the loader (hf_tokenizer_loader.h).
//
// Errors name the file (and the line of merges.txt). Stateless; safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {

// transformers' Qwen2Tokenizer PRETOKENIZE_REGEX (Oniguruma / `regex` module syntax).
extern const char kQwen2PretokenizePattern[];

// The added vocabulary of the result holds added_tokens_decoder and is not Finish()ed.
absl::StatusOr<HfTokenizer::Parts> ReadQwen2SlowTokenizer(const std::string& dir,
                                                          const TokenizerConfig& config);
// The same over `folder`'s vocab.json and merges.txt (on disk or in memory).
absl::StatusOr<HfTokenizer::Parts> ReadQwen2SlowTokenizer(const TokenizerFolder& folder,
                                                          const TokenizerConfig& config);

}  // namespace ditserve::tokenizers
