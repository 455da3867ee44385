#include "models/tokenizers/bpe_model.h"

#include <cstdio>
#include <queue>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {

struct BpeModel::Cache {
  mutable absl::Mutex mu;
  absl::flat_hash_map<std::string, std::vector<int64_t>> words ABSL_GUARDED_BY(mu);
};

namespace {

// Length of the UTF-8 character starting with byte `lead` (1 for stray continuation bytes).
size_t Utf8Length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Words longer than this are encoded but not cached (bounded cache memory).
constexpr size_t kMaxCachedWordBytes = 256;

// The byte-fallback token of one byte: "<0x0A>" (Rust's format "<{b:#04X}>").
std::string ByteFallbackToken(unsigned char byte) {
  char buffer[8];
  std::snprintf(buffer, sizeof(buffer), "<0x%02X>", byte);
  return buffer;
}

// A word's initial symbols, one per character (or per byte with byte fallback). As in the
// reference, an unknown character is held back and emitted when the next known character (or the
// word's end) comes, so byte-fallback tokens emitted in between come first.
std::vector<int64_t> InitialSymbols(absl::string_view word, const BpeOptions& options,
                                    int64_t unk_id, const BpeModel& model) {
  std::vector<int64_t> initial;
  std::optional<int64_t> pending_unk;
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len =
        std::min(Utf8Length(static_cast<unsigned char>(word[pos])), word.size() - pos);
    piece.clear();
    if (pos > 0) piece.append(options.continuing_subword_prefix);
    piece.append(word.data() + pos, len);
    pos += len;
    if (pos == word.size()) piece.append(options.end_of_word_suffix);

    if (const auto id = model.TokenToId(piece)) {
      if (pending_unk) initial.push_back(*pending_unk);
      pending_unk.reset();
      initial.push_back(*id);
      continue;
    }
    if (options.byte_fallback) {
      std::vector<int64_t> bytes;
      for (char b : piece) {
        const auto id = model.TokenToId(ByteFallbackToken(static_cast<unsigned char>(b)));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == piece.size()) {
        initial.insert(initial.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id < 0) continue;  // no unknown token: the character is dropped
    if (pending_unk && !options.fuse_unk) initial.push_back(*pending_unk);
    pending_unk = unk_id;
  }
  if (pending_unk) initial.push_back(*pending_unk);
  return initial;
}

// Applies the merges to `initial` (at least 2 symbols). `find_merge(left_id, right_id)` gives the
// pair's merge ({rank, new_id}) or null. Symbols form a linked list; a merge folds the right symbol
// into the left one. The queue orders candidate merges by (rank, position); entries made stale by
// an earlier merge are recognised and skipped when popped.
template <typename FindMerge>
std::vector<int64_t> ApplyMerges(const std::vector<int64_t>& initial, const FindMerge& find_merge) {
  struct Symbol {
    int64_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(initial.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    const int index = static_cast<int>(i);
    symbols.push_back(Symbol{initial[i], index - 1, index + 1, true});
  }
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int pos;
    int64_t new_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int left) {
    const int right = symbols[left].next;
    if (right < 0) return;
    if (const auto* merge = find_merge(symbols[left].id, symbols[right].id)) {
      queue.push(Candidate{merge->rank, left, merge->new_id});
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto* merge = find_merge(left.id, right.id);
    if (merge == nullptr || merge->new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }

  std::vector<int64_t> ids;
  for (int i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

}  // namespace

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

absl::StatusOr<BpeModel> BpeModel::Create(
    BpeVocab vocab, const BpeMerges& merges, BpeOptions options,
    const std::string& vocab_location, const std::function<std::string(size_t)>& merge_location) {
  BpeModel model;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_location, ": id ", id, " of token \"",
                                                     token, "\" is not in [0, 2^31)"));
    }
  }
  model.vocab_ = std::move(vocab);
  model.options_ = std::move(options);
  if (model.options_.unk_token) {
    auto unk = model.TokenToId(*model.options_.unk_token);
    if (!unk) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_location, ": unknown token \"",
                                                     *model.options_.unk_token,
                                                     "\" is not in the vocabulary"));
    }
    model.unk_id_ = *unk;
  }
  const std::string& prefix = model.options_.continuing_subword_prefix;
  model.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = merges[i];
    const auto left_id = model.TokenToId(left);
    const auto right_id = model.TokenToId(right);
    if (!left_id || !right_id) {
      return absl::InvalidArgumentError(
          absl::StrCat(merge_location(i), ": merge \"", left, " ", right, "\" uses token \"",
                       left_id ? right : left, "\", which is not in the vocabulary"));
    }
    if (right.size() < prefix.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          merge_location(i), ": merge \"", left, " ", right,
          "\": right part shorter than the continuing-subword prefix \"", prefix, "\""));
    }
    const std::string merged = absl::StrCat(left, absl::string_view(right).substr(prefix.size()));
    const auto new_id = model.TokenToId(merged);
    if (!new_id) {
      return absl::InvalidArgumentError(absl::StrCat(merge_location(i), ": merge \"", left, " ",
                                                     right, "\" makes \"", merged,
                                                     "\", which is not in the vocabulary"));
    }
    // A pair listed twice keeps its last rank, as the reference does.
    model.merges_[PairKey(*left_id, *right_id)] = Merge{static_cast<uint32_t>(i), *new_id};
  }
  return model;
}

absl::StatusOr<BpeVocab> BpeModel::ReadVocabFile(const std::string& vocab_path) {
  ASSIGN_OR_RETURN(std::string vocab_text, ReadWholeFile(vocab_path));
  return ParseVocab(vocab_text, vocab_path);
}

absl::StatusOr<BpeVocab> BpeModel::ParseVocab(const std::string& vocab_text,
                                              const std::string& vocab_path) {
  if (JsonNestingExceeds(vocab_text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_path, ": nests deeper than ", kMaxJsonDepth, " levels"));
  }
  const nlohmann::json vocab =
      nlohmann::json::parse(vocab_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_path, ": not a JSON object of token -> id"));
  }
  BpeVocab out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_path, ": id of token \"", token, "\" is not an integer in [0, 2^31), got ",
                       id.is_number() ? id.dump() : JsonTypePhrase(id)));
    }
    out[token] = id.get<int64_t>();
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": empty"));
  return out;
}

absl::StatusOr<BpeMerges> BpeModel::ReadMergesFile(const std::string& merges_path,
                                                   std::vector<int>* line_numbers) {
  ASSIGN_OR_RETURN(std::string merges_text, ReadWholeFile(merges_path));
  return ParseMerges(merges_text, merges_path, line_numbers);
}

absl::StatusOr<BpeMerges> BpeModel::ParseMerges(absl::string_view merges_text,
                                                const std::string& merges_path,
                                                std::vector<int>* line_numbers) {
  BpeMerges merges;
  absl::string_view rest = merges_text;
  for (int line_no = 1; !rest.empty(); ++line_no) {
    const size_t eol = rest.find('\n');
    absl::string_view line = rest.substr(0, eol);
    rest = eol == absl::string_view::npos ? absl::string_view() : rest.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && absl::StartsWith(line, "#version")) continue;
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_path, ":", line_no, ": expected \"left right\", got \"", line, "\""));
    }
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
    if (line_numbers != nullptr) line_numbers->push_back(line_no);
  }
  return merges;
}

absl::StatusOr<BpeModel> BpeModel::Load(const std::string& vocab_path,
                                        const std::string& merges_path,
                                        const std::string& end_of_word_suffix,
                                        const std::string& unk_token) {
  ASSIGN_OR_RETURN(BpeVocab vocab, ReadVocabFile(vocab_path));
  if (!vocab.contains(unk_token)) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_path, ": unknown token \"", unk_token, "\" is not in the vocabulary"));
  }
  std::vector<int> lines;
  ASSIGN_OR_RETURN(BpeMerges merges, ReadMergesFile(merges_path, &lines));
  BpeOptions options;
  options.unk_token = unk_token;
  options.end_of_word_suffix = end_of_word_suffix;
  return Create(std::move(vocab), merges, std::move(options), vocab_path,
                [&](size_t i) { return absl::StrCat(merges_path, ":", lines[i]); });
}

std::optional<int64_t> BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::EncodeWord(absl::string_view word, std::vector<int64_t>* out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = TokenToId(word)) {
      out->push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::ReaderMutexLock lock(&cache_->mu);
    auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> ids = MergeWord(word);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_->mu);
    if (cache_->words.size() < kCacheCapacity) cache_->words.emplace(word, std::move(ids));
  }
}

std::vector<int64_t> BpeModel::MergeWord(absl::string_view word) const {
  std::vector<int64_t> initial = InitialSymbols(word, options_, unk_id_, *this);
  if (initial.size() < 2) return initial;
  return ApplyMerges(initial, [this](int64_t left, int64_t right) -> const Merge* {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  });
}

}  // namespace ditserve::tokenizers
