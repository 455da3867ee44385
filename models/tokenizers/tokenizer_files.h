// File helpers shared by the tokenizers: whole-file reads and tokenizer_config.json. Torch-free.
//
// Every error names the file it is about. Stateless functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::tokenizers {

// The bytes of `path`; NOT_FOUND if it does not exist, DATA_LOSS if it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// `dir`/`name` (no normalisation beyond joining with one '/').
std::string JoinPath(const std::string& dir, const std::string& name);

bool FileExists(const std::string& path);

// One entry of tokenizer_config.json's "added_tokens_decoder" (transformers' AddedToken; flags
// default as there: false, and normalized = !special).
struct AddedTokenEntry {
  int64_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// The fields of a Hugging Face tokenizer_config.json that the tokenizers here use. Special tokens
// may be written as plain strings or as AddedToken objects ({"content": ...}); both are accepted.
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // "extra_special_tokens" (transformers 5) or "additional_special_tokens" (4.x), in file order.
  std::vector<std::string> extra_special_tokens;
  // "added_tokens_decoder" (transformers >= 4.34), in file order.
  std::vector<AddedTokenEntry> added_tokens_decoder;
  std::optional<int64_t> model_max_length;  // absent, or the 1e30 "unlimited" sentinel
  std::optional<int64_t> extra_ids;         // T5's "extra_ids"
  // Every top-level key of the file (null-valued ones included): tells "absent" from "null".
  std::set<std::string> keys;
};

// Parses tokenizer_config.json at `path`. A missing file is NOT an error (returns defaults): many
// checkpoints ship without one. Malformed JSON or wrongly typed fields are INVALID_ARGUMENT.
absl::StatusOr<TokenizerConfig> LoadTokenizerConfig(const std::string& path);

}  // namespace ditserve::tokenizers
