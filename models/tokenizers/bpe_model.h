// A BPE model as Hugging Face tokenizers' `BPE` (models/bpe/model.rs): vocabulary, ranked merges,
// and the options that tokenizer.json files use. Torch-free.
//
// EncodeWord() takes one pre-tokenised word (for byte-level tokenizers already mapped to byte-level
// characters) and:
//   1. with ignore_merges, emits the word's own id if the whole word is in the vocabulary;
//   2. otherwise splits it into characters, the continuing-subword prefix put before every
//      character but the first and the end-of-word suffix after the last; a character missing from
//      the vocabulary becomes, with byte_fallback, its bytes' "<0xAB>" tokens (when all exist),
//      else the unknown token (consecutive ones fused into one with fuse_unk), else nothing (no
//      unknown token configured: the character is dropped, as the reference does);
//   3. applies merges: repeatedly the adjacent pair with the lowest merge rank, leftmost first,
//      until none applies (a pair listed twice keeps its last rank). A merge (a, b) produces the
//      token a + b minus b's continuing-subword prefix.
// Results are cached per word (up to kCacheCapacity words).
//
// Ownership: owns its tables. Thread-safety: EncodeWord() is const and may be called concurrently;
// the cache is guarded by a mutex. Movable, not copyable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

struct BpeOptions {
  std::optional<std::string> unk_token;   // must be in the vocabulary when set
  std::string continuing_subword_prefix;  // "" = none
  std::string end_of_word_suffix;         // "" = none
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

using BpeVocab = absl::flat_hash_map<std::string, int64_t>;
using BpeMerges = std::vector<std::pair<std::string, std::string>>;

class BpeModel {
 public:
  static constexpr size_t kCacheCapacity = 10000;

  // `merge_location(i)` names merge i in errors (e.g. "tokenizer.json: model.merges[12]");
  // `vocab_location` names the vocabulary (e.g. "tokenizer.json: model.vocab"). Every merge's
  // parts and result must be in the vocabulary; ids must be in [0, 2^31).
  static absl::StatusOr<BpeModel> Create(BpeVocab vocab, const BpeMerges& merges,
                                         BpeOptions options, const std::string& vocab_location,
                                         const std::function<std::string(size_t)>& merge_location);

  // `vocab_path`: JSON object token -> id. `merges_path`: optional "#version" line, then one
  // "left right" pair per line, rank = order. `unk_token` must be in the vocab. Errors name the
  // file (and line for merges).
  static absl::StatusOr<BpeModel> Load(const std::string& vocab_path,
                                       const std::string& merges_path,
                                       const std::string& end_of_word_suffix,
                                       const std::string& unk_token);

  // The files of Load(), read alone. ReadMergesFile() also gives each merge's line number.
  static absl::StatusOr<BpeVocab> ReadVocabFile(const std::string& vocab_path);
  static absl::StatusOr<BpeMerges> ReadMergesFile(const std::string& merges_path,
                                                  std::vector<int>* line_numbers);
  // What they do with the file's text; the path names the file in messages.
  static absl::StatusOr<BpeVocab> ParseVocab(const std::string& vocab_text,
                                             const std::string& vocab_path);
  static absl::StatusOr<BpeMerges> ParseMerges(absl::string_view merges_text,
                                               const std::string& merges_path,
                                               std::vector<int>* line_numbers);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of `word` (valid UTF-8; nothing for an empty word) to `out`.
  void EncodeWord(absl::string_view word, std::vector<int64_t>* out) const;

  std::optional<int64_t> TokenToId(absl::string_view token) const;
  size_t vocab_size() const { return vocab_.size(); }
  size_t merges_size() const { return merges_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int64_t new_id;
  };
  struct Cache;

  BpeModel();
  std::vector<int64_t> MergeWord(absl::string_view word) const;
  static uint64_t PairKey(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
  }

  BpeVocab vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  int64_t unk_id_ = -1;  // -1: no unknown token
  std::unique_ptr<Cache> cache_;
};

}  // namespace ditserve::tokenizers
