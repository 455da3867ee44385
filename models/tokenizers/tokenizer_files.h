// File helpers shared by the tokenizers: whole-file reads, a folder's files on disk or in memory
// (TokenizerFolder) and tokenizer_config.json. Torch-free.
//
// Every error names the file it is about. Stateless functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

// The bytes of `path`; NOT_FOUND if it does not exist, DATA_LOSS if it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// `dir`/`name` (no normalisation beyond joining with one '/').
std::string JoinPath(const std::string& dir, const std::string& name);

bool FileExists(const std::string& path);

// The files of a tokenizer folder, by name ("tokenizer.json"): on disk (what the loaders read), or
// given in memory (the fuzz target, tests), so that the same parsing code runs on bytes that never
// were a file. Path(name) is JoinPath(dir, name) either way: the name messages give the file.
// Immutable; an in-memory folder does not own its bytes (they must outlive it).
class TokenizerFolder {
 public:
  static TokenizerFolder OnDisk(std::string dir);
  // `files`: name -> bytes; no other name exists.
  static TokenizerFolder InMemory(std::string dir, std::map<std::string, absl::string_view> files);

  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }
  // On disk: FileExists(Path(name)) / ReadWholeFile(Path(name)). In memory: whether `files` has
  // it / its bytes, NOT_FOUND "<path>: no such file" as on disk when it does not.
  bool Exists(const std::string& name) const;
  absl::StatusOr<std::string> Read(const std::string& name) const;

 private:
  TokenizerFolder(std::string dir, bool in_memory, std::map<std::string, absl::string_view> files)
      : dir_(std::move(dir)), in_memory_(in_memory), files_(std::move(files)) {}
  std::string dir_;
  bool in_memory_ = false;
  std::map<std::string, absl::string_view> files_;
};

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
// The same for `folder`'s file `name` (absent: defaults).
absl::StatusOr<TokenizerConfig> LoadTokenizerConfig(const TokenizerFolder& folder,
                                                    const std::string& name);
// The parser the loaders run on the file's text; `path` names the file in messages.
absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(const std::string& text,
                                                     const std::string& path);

}  // namespace ditserve::tokenizers
