#include "models/tokenizers/bpe_model.h"

#include <queue>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

}  // namespace

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

absl::StatusOr<BpeModel> BpeModel::Load(const std::string& vocab_path,
                                        const std::string& merges_path,
                                        const std::string& end_of_word_suffix,
                                        const std::string& unk_token) {
  BpeModel model;
  model.suffix_ = end_of_word_suffix;

  ASSIGN_OR_RETURN(std::string vocab_text, ReadWholeFile(vocab_path));
  const nlohmann::json vocab =
      nlohmann::json::parse(vocab_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_path, ": not a JSON object of token -> id"));
  }
  model.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_path, ": id of token \"", token, "\" is not an integer in [0, 2^31)"));
    }
    model.vocab_[token] = id.get<int64_t>();
  }
  if (model.vocab_.empty()) return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": empty"));

  auto unk = model.TokenToId(unk_token);
  if (!unk) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_path, ": unknown token \"", unk_token, "\" is not in the vocabulary"));
  }
  model.unk_id_ = *unk;

  ASSIGN_OR_RETURN(std::string merges_text, ReadWholeFile(merges_path));
  absl::string_view rest = merges_text;
  uint32_t rank = 0;
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
    const absl::string_view left = line.substr(0, space);
    const absl::string_view right = line.substr(space + 1);
    const auto left_id = model.TokenToId(left);
    const auto right_id = model.TokenToId(right);
    const auto new_id = model.TokenToId(absl::StrCat(left, right));
    if (!left_id || !right_id || !new_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          merges_path, ":", line_no, ": merge \"", line, "\" uses a token missing from ",
          vocab_path));
    }
    // A pair listed twice keeps its last rank, as the reference does.
    model.merges_[PairKey(*left_id, *right_id)] = Merge{rank++, *new_id};
  }
  return model;
}

std::optional<int64_t> BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::EncodeWord(absl::string_view word, std::vector<int64_t>* out) const {
  if (word.empty()) return;
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
  // Symbols form a linked list over the word's characters; a merge folds the right symbol into the
  // left one. The queue orders candidate merges by (rank, position); entries made stale by an
  // earlier merge are recognised and skipped when popped.
  struct Symbol {
    int64_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  std::string with_suffix;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = std::min(Utf8Length(static_cast<unsigned char>(word[pos])), word.size() - pos);
    absl::string_view piece = word.substr(pos, len);
    pos += len;
    if (pos == word.size() && !suffix_.empty()) {
      with_suffix = absl::StrCat(piece, suffix_);
      piece = with_suffix;
    }
    const auto id = TokenToId(piece);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{id ? *id : unk_id_, index - 1, index + 1, true});
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
    auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale
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

}  // namespace ditserve::tokenizers
