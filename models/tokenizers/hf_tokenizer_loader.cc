#include "models/tokenizers/hf_tokenizer_loader.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/hf_tokenizer_json.h"
#include "models/tokenizers/qwen2_slow_tokenizer.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {
namespace {

constexpr char kQwen2DefaultSpecial[] = "<|endoftext|>";

struct SpecialTokenNames {
  std::optional<std::string> bos, eos, unk, pad;
  std::vector<std::string> additional;
};

// tokenizer_config.json's special tokens, overridden by special_tokens_map.json's, then (slow
// Qwen2 only) the class defaults for keys that neither file has.
absl::StatusOr<SpecialTokenNames> SpecialTokens(const TokenizerFolder& folder,
                                                const TokenizerConfig& config, bool qwen2_slow) {
  SpecialTokenNames names{config.bos_token, config.eos_token, config.unk_token, config.pad_token,
                          config.extra_special_tokens};
  std::set<std::string> keys = config.keys;
  if (folder.Exists("special_tokens_map.json")) {
    ASSIGN_OR_RETURN(const TokenizerConfig map,
                     LoadTokenizerConfig(folder, "special_tokens_map.json"));
    const std::pair<const char*, std::pair<std::optional<std::string>*,
                                           const std::optional<std::string>*>> fields[] = {
        {"bos_token", {&names.bos, &map.bos_token}},
        {"eos_token", {&names.eos, &map.eos_token}},
        {"unk_token", {&names.unk, &map.unk_token}},
        {"pad_token", {&names.pad, &map.pad_token}}};
    for (const auto& [key, slots] : fields) {
      if (map.keys.count(key) == 0) continue;
      *slots.first = *slots.second;
      keys.insert(key);
    }
    if (map.keys.count("additional_special_tokens") || map.keys.count("extra_special_tokens")) {
      names.additional = map.extra_special_tokens;
    }
  }
  if (qwen2_slow) {
    if (!keys.count("unk_token")) names.unk = kQwen2DefaultSpecial;
    if (!keys.count("eos_token")) names.eos = kQwen2DefaultSpecial;
    if (!keys.count("pad_token")) names.pad = kQwen2DefaultSpecial;
  }
  return names;
}

absl::Status ApplyTokenizerConfig(const TokenizerFolder& folder, const TokenizerConfig& config,
                                  bool from_tokenizer_json, HfTokenizer::Parts* parts) {
  if (from_tokenizer_json && !config.added_tokens_decoder.empty()) {
    std::vector<AddedTokenEntry> entries = config.added_tokens_decoder;
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& a, const auto& b) { return a.id < b.id; });
    std::vector<HfAddedToken> tokens;
    for (const AddedTokenEntry& e : entries) {
      tokens.push_back(
          HfAddedToken{e.content, e.special, e.single_word, e.lstrip, e.rstrip, e.normalized});
    }
    parts->added.Add(tokens, parts->model);
  }

  ASSIGN_OR_RETURN(const SpecialTokenNames names,
                   SpecialTokens(folder, config, /*qwen2_slow=*/!from_tokenizer_json));
  std::vector<std::string> specials;
  for (const auto* name : {&names.bos, &names.eos, &names.unk, &names.pad}) {
    if (*name) specials.push_back(**name);
  }
  specials.insert(specials.end(), names.additional.begin(), names.additional.end());
  std::vector<HfAddedToken> missing;
  for (const std::string& content : specials) {
    const bool listed = std::any_of(missing.begin(), missing.end(),
                                    [&](const HfAddedToken& t) { return t.content == content; });
    if (content.empty() || listed || parts->added.TokenToId(content)) continue;
    HfAddedToken token;
    token.content = content;
    token.special = true;
    token.normalized = false;
    missing.push_back(std::move(token));
  }
  if (!missing.empty()) parts->added.Add(missing, parts->model);
  RETURN_IF_ERROR(parts->added.Finish(parts->normalizer));

  auto resolve = [&](const std::optional<std::string>& name) -> std::optional<int64_t> {
    if (!name) return std::nullopt;
    if (auto id = parts->added.TokenToId(*name)) return id;
    return parts->model.TokenToId(*name);
  };
  parts->special.bos_id = resolve(names.bos);
  parts->special.eos_id = resolve(names.eos);
  parts->special.unk_id = resolve(names.unk);
  parts->special.pad_id = resolve(names.pad);
  parts->model_max_length = config.model_max_length;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfTokenizer> LoadHfTokenizer(const std::string& dir) {
  return LoadHfTokenizer(TokenizerFolder::OnDisk(dir));
}

absl::StatusOr<HfTokenizer> LoadHfTokenizer(const TokenizerFolder& folder) {
  ASSIGN_OR_RETURN(const TokenizerConfig config,
                   LoadTokenizerConfig(folder, "tokenizer_config.json"));
  const bool from_tokenizer_json = folder.Exists("tokenizer.json");
  absl::StatusOr<HfTokenizer::Parts> parts = absl::NotFoundError(absl::StrCat(
      folder.dir(), ": no tokenizer.json, and no vocab.json + merges.txt (slow Qwen2 format)"));
  if (from_tokenizer_json) {
    absl::StatusOr<std::string> text = folder.Read("tokenizer.json");
    if (!text.ok()) return text.status();
    parts = ParseHfTokenizerJson(*text, folder.Path("tokenizer.json"));
  } else if (folder.Exists("vocab.json") && folder.Exists("merges.txt")) {
    parts = ReadQwen2SlowTokenizer(folder, config);
  }
  if (!parts.ok()) return parts.status();
  RETURN_IF_ERROR(ApplyTokenizerConfig(folder, config, from_tokenizer_json, &*parts));
  return HfTokenizer(std::move(*parts));
}

}  // namespace ditserve::tokenizers
