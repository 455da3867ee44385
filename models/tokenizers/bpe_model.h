// A byte-level BPE model (vocab.json + merges.txt), as Hugging Face tokenizers' `BPE` model with an
// end-of-word suffix (CLIP: "</w>") and no continuing-subword prefix. Torch-free.
//
// EncodeWord() takes one pre-tokenised word already mapped to byte-level characters, appends the
// suffix to its last character, then applies merges: repeatedly the adjacent pair with the lowest
// merge rank, leftmost first, until none applies. Characters missing from the vocabulary become the
// unknown token (never merged). Results are cached per word (up to kCacheCapacity words).
//
// Ownership: owns its tables. Thread-safety: EncodeWord() is const and may be called concurrently;
// the cache is guarded by a mutex. Movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

class BpeModel {
 public:
  static constexpr size_t kCacheCapacity = 10000;

  // `vocab_path`: JSON object token -> id. `merges_path`: optional "#version" line, then one
  // "left right" pair per line, rank = order. Every merge's parts and result must be in the vocab.
  // `unk_token` must be in the vocab. Errors name the file (and line for merges).
  static absl::StatusOr<BpeModel> Load(const std::string& vocab_path,
                                       const std::string& merges_path,
                                       const std::string& end_of_word_suffix,
                                       const std::string& unk_token);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of `word` (non-empty, byte-level characters, valid UTF-8) to `out`.
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

  absl::flat_hash_map<std::string, int64_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::string suffix_;
  int64_t unk_id_ = -1;
  std::unique_ptr<Cache> cache_;
};

}  // namespace ditserve::tokenizers
