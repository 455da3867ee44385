#include "models/tokenizers/qwen2_slow_tokenizer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::tokenizers {

const char kQwen2PretokenizePattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

absl::StatusOr<HfTokenizer::Parts> ReadQwen2SlowTokenizer(const std::string& dir,
                                                          const TokenizerConfig& config) {
  return ReadQwen2SlowTokenizer(TokenizerFolder::OnDisk(dir), config);
}

absl::StatusOr<HfTokenizer::Parts> ReadQwen2SlowTokenizer(const TokenizerFolder& folder,
                                                          const TokenizerConfig& config) {
  const std::string vocab_path = folder.Path("vocab.json");
  const std::string merges_path = folder.Path("merges.txt");
  ASSIGN_OR_RETURN(const std::string vocab_text, folder.Read("vocab.json"));
  ASSIGN_OR_RETURN(BpeVocab vocab, BpeModel::ParseVocab(vocab_text, vocab_path));
  std::vector<int> lines;
  ASSIGN_OR_RETURN(const std::string merges_text, folder.Read("merges.txt"));
  ASSIGN_OR_RETURN(BpeMerges merges, BpeModel::ParseMerges(merges_text, merges_path, &lines));
  auto merge_line = [&](size_t i) { return absl::StrCat(merges_path, ":", lines[i]); };
  ASSIGN_OR_RETURN(BpeModel model, BpeModel::Create(std::move(vocab), merges, BpeOptions(),
                                                    vocab_path, merge_line));

  HfTokenizer::Parts parts(std::move(model));
  parts.source = absl::StrCat(vocab_path, " + ", merges_path);
  parts.normalizer.AddNfc();
  ASSIGN_OR_RETURN(Pcre2Regex split, Pcre2Regex::Compile(kQwen2PretokenizePattern));
  parts.pre_tokenizer.AddSplit(std::move(split), SplitBehavior::kIsolated, /*invert=*/false);
  RETURN_IF_ERROR(parts.pre_tokenizer.AddByteLevel(/*add_prefix_space=*/false,
                                                   /*use_regex=*/false));
  std::vector<std::pair<int64_t, HfAddedToken>> added;
  for (const AddedTokenEntry& entry : config.added_tokens_decoder) {
    added.emplace_back(entry.id, HfAddedToken{entry.content, entry.special, entry.single_word,
                                              entry.lstrip, entry.rstrip, entry.normalized});
  }
  parts.added.AddWithIds(added);
  return parts;
}

}  // namespace ditserve::tokenizers
