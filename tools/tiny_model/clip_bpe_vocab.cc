#include "tools/tiny_model/clip_bpe_vocab.h"

#include <cctype>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/byte_level.h"
#include "tools/tiny_model/file_util.h"

namespace ditserve::tiny_model {
namespace {

using Pair = std::pair<std::string, std::string>;

// CLIP's pre-tokenizer pattern ('s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+) for
// ASCII text, after lower-casing. Non-ASCII bytes count as "other" characters: the corpus is
// ASCII, and byte-level BPE covers any byte anyway.
std::vector<std::string> PreTokenize(const std::string& line) {
  static const char* const kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  std::string text;
  for (unsigned char c : line) text += static_cast<char>(std::tolower(c));
  std::vector<std::string> words;
  size_t i = 0;
  auto is_letter = [](unsigned char c) { return c < 128 && std::isalpha(c); };
  auto is_digit = [](unsigned char c) { return c < 128 && std::isdigit(c); };
  auto is_space = [](unsigned char c) { return c < 128 && std::isspace(c); };
  while (i < text.size()) {
    const unsigned char c = text[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    bool matched = false;
    if (c == '\'') {
      for (const char* contraction : kContractions) {
        if (text.compare(i, std::char_traits<char>::length(contraction), contraction) == 0) {
          words.emplace_back(contraction);
          i += words.back().size();
          matched = true;
          break;
        }
      }
    }
    if (matched) continue;
    size_t j = i + 1;
    if (is_letter(c)) {
      while (j < text.size() && is_letter(text[j])) ++j;
    } else if (!is_digit(c)) {
      while (j < text.size() && !is_letter(text[j]) && !is_digit(text[j]) && !is_space(text[j])) ++j;
    }
    words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

// The 256 byte values in the order of GPT-2's bytes_to_unicode table: the bytes that stand for
// themselves first, then the remapped ones in byte order.
std::vector<int> ByteOrder() {
  std::vector<int> order;
  std::vector<bool> taken(256, false);
  auto add_range = [&](int lo, int hi) {
    for (int b = lo; b <= hi; ++b) {
      order.push_back(b);
      taken[b] = true;
    }
  };
  add_range('!', '~');
  add_range(0xA1, 0xAC);
  add_range(0xAE, 0xFF);
  for (int b = 0; b < 256; ++b) {
    if (!taken[b]) order.push_back(b);
  }
  return order;
}

struct Word {
  std::vector<std::string> symbols;
  int64_t count = 0;
};

void MergeInWord(const Pair& pair, Word* word) {
  std::vector<std::string> merged;
  merged.reserve(word->symbols.size());
  for (size_t i = 0; i < word->symbols.size(); ++i) {
    if (i + 1 < word->symbols.size() && word->symbols[i] == pair.first &&
        word->symbols[i + 1] == pair.second) {
      merged.push_back(pair.first + pair.second);
      ++i;
    } else {
      merged.push_back(word->symbols[i]);
    }
  }
  word->symbols = std::move(merged);
}

}  // namespace

std::string ClipBpeFiles::VocabJson() const {
  std::string out = "{";
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (id > 0) out += ", ";
    absl::StrAppend(&out, nlohmann::json(vocab[id]).dump(-1, ' ', /*ensure_ascii=*/false), ": ", id);
  }
  out += "}";
  return out;
}

std::string ClipBpeFiles::MergesText() const {
  std::string out = "#version: 0.2\n";
  for (const auto& [left, right] : merges) absl::StrAppend(&out, left, " ", right, "\n");
  return out;
}

absl::StatusOr<ClipBpeFiles> TrainClipBpe(const std::string& corpus, int num_merges) {
  if (num_merges < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_merges must be >= 0, got ", num_merges));
  }
  const auto& byte_chars = tokenizers::ByteToUnicodeTable();

  // Distinct words with their counts; std::map keeps the training order independent of hashing.
  std::map<std::string, int64_t> word_counts;
  size_t start = 0;
  while (start < corpus.size()) {
    size_t end = corpus.find('\n', start);
    if (end == std::string::npos) end = corpus.size();
    for (auto& w : PreTokenize(corpus.substr(start, end - start))) ++word_counts[w];
    start = end + 1;
  }
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (const auto& [text, count] : word_counts) {
    Word w;
    w.count = count;
    for (unsigned char b : text) w.symbols.push_back(byte_chars[b]);
    w.symbols.back() += "</w>";
    words.push_back(std::move(w));
  }

  ClipBpeFiles files;
  for (int b : ByteOrder()) files.vocab.push_back(byte_chars[b]);
  for (int b : ByteOrder()) files.vocab.push_back(byte_chars[b] + "</w>");

  std::set<std::string> known(files.vocab.begin(), files.vocab.end());
  for (int m = 0; m < num_merges; ++m) {
    std::map<Pair, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        pair_counts[{w.symbols[i], w.symbols[i + 1]}] += w.count;
      }
    }
    const Pair* best = nullptr;
    int64_t best_count = 1;  // a pair seen once teaches nothing
    std::string best_text;
    for (const auto& [pair, count] : pair_counts) {
      std::string text = pair.first + " " + pair.second;
      if (count > best_count || (count == best_count && best != nullptr && text < best_text)) {
        best = &pair;
        best_count = count;
        best_text = std::move(text);
      }
    }
    if (best == nullptr) break;
    const Pair chosen = *best;
    for (Word& w : words) MergeInWord(chosen, &w);
    files.merges.push_back(chosen);
    // Two merges can spell the same token ("ab"+"c", "a"+"bc"); it gets one id, at its first.
    if (known.insert(chosen.first + chosen.second).second) {
      files.vocab.push_back(chosen.first + chosen.second);
    }
  }
  files.vocab.emplace_back(kClipBosToken);
  files.vocab.emplace_back(kClipEosToken);
  return files;
}

namespace {

// tokenizer_config.json as transformers 5 writes it for CLIPTokenizer (the fixture's keys), with
// `model_max_length` (77 for FLUX.1).
std::string ClipTokenizerConfigJson(int model_max_length) {
  nlohmann::json config = {
      {"backend", "tokenizers"},
      {"bos_token", kClipBosToken},
      {"eos_token", kClipEosToken},
      {"is_local", true},
      {"local_files_only", false},
      {"model_max_length", model_max_length},
      {"pad_token", kClipEosToken},
      {"tokenizer_class", "CLIPTokenizer"},
      {"unk_token", kClipEosToken},
  };
  return ConfigJsonText(config);
}

}  // namespace

absl::Status WriteClipTokenizer(const std::string& dir, const ClipBpeFiles& files,
                                int model_max_length) {
  RETURN_IF_ERROR(WriteFile(JoinPath(dir, "vocab.json"), files.VocabJson()));
  RETURN_IF_ERROR(WriteFile(JoinPath(dir, "merges.txt"), files.MergesText()));
  return WriteFile(JoinPath(dir, "tokenizer_config.json"),
                   ClipTokenizerConfigJson(model_max_length));
}

}  // namespace ditserve::tiny_model
