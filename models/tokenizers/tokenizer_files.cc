#include "models/tokenizers/tokenizer_files.h"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::tokenizers {
namespace {

using Json = nlohmann::json;

// A special token is either "text" or {"content": "text", ...}; null means "not set".
absl::StatusOr<std::optional<std::string>> TokenContent(const Json& value, const std::string& what,
                                                        const std::string& path) {
  if (value.is_null()) return std::optional<std::string>();
  if (value.is_string()) return std::optional<std::string>(value.get<std::string>());
  if (value.is_object()) {
    auto it = value.find("content");
    if (it != value.end() && it->is_string()) {
      return std::optional<std::string>(it->get<std::string>());
    }
  }
  return JsonTypeError(path, what, "a string or {\"content\": string}", value);
}

// bos/eos/pad/unk_token, each a special token or null.
absl::Status ReadSpecialTokens(const Json& json, const std::string& path, TokenizerConfig* config) {
  const std::pair<const char*, std::optional<std::string>*> specials[] = {
      {"bos_token", &config->bos_token},
      {"eos_token", &config->eos_token},
      {"pad_token", &config->pad_token},
      {"unk_token", &config->unk_token}};
  for (const auto& [key, field] : specials) {
    auto it = json.find(key);
    if (it == json.end()) continue;
    ASSIGN_OR_RETURN(*field, TokenContent(*it, key, path));
  }
  return absl::OkStatus();
}

// extra_special_tokens / additional_special_tokens, in that order, appended to one list.
absl::Status ReadExtraSpecialTokens(const Json& json, const std::string& path,
                                    TokenizerConfig* config) {
  for (const char* key : {"extra_special_tokens", "additional_special_tokens"}) {
    auto it = json.find(key);
    if (it == json.end() || it->is_null()) continue;
    // A list (transformers 4.x), or name -> token (transformers 5's extra_special_tokens).
    if (!it->is_array() && !it->is_object()) {
      return JsonTypeError(path, key, "an array or an object", *it);
    }
    size_t index = 0;
    for (auto item = it->begin(); item != it->end(); ++item, ++index) {
      const std::string field =
          it->is_array() ? absl::StrCat(key, "[", index, "]") : absl::StrCat(key, ".", item.key());
      ASSIGN_OR_RETURN(std::optional<std::string> content, TokenContent(*item, field, path));
      if (content) config->extra_special_tokens.push_back(*content);
    }
  }
  return absl::OkStatus();
}

// An added token's flags when it is an object: special, single_word, lstrip, rstrip, then
// normalized (default: not special); a plain string is normalized.
absl::Status ReadAddedTokenFlags(const Json& token, const std::string& id_text,
                                 const std::string& path, AddedTokenEntry* entry) {
  if (!token.is_object()) {
    entry->normalized = true;
    return absl::OkStatus();
  }
  const std::pair<const char*, bool*> flags[] = {{"special", &entry->special},
                                                 {"single_word", &entry->single_word},
                                                 {"lstrip", &entry->lstrip},
                                                 {"rstrip", &entry->rstrip}};
  for (const auto& [key, field] : flags) {
    auto flag = token.find(key);
    if (flag == token.end() || flag->is_null()) continue;
    if (!flag->is_boolean()) {
      return JsonTypeError(path, absl::StrCat("added_tokens_decoder.", id_text, ".", key),
                           "a boolean", *flag);
    }
    *field = flag->get<bool>();
  }
  entry->normalized = !entry->special;
  if (auto flag = token.find("normalized"); flag != token.end() && !flag->is_null()) {
    if (!flag->is_boolean()) {
      return JsonTypeError(path, absl::StrCat("added_tokens_decoder.", id_text, ".normalized"),
                           "a boolean", *flag);
    }
    entry->normalized = flag->get<bool>();
  }
  return absl::OkStatus();
}

// added_tokens_decoder: id (decimal text) -> token, a null content skipped.
absl::Status ReadAddedTokensDecoder(const Json& json, const std::string& path,
                                    TokenizerConfig* config) {
  auto it = json.find("added_tokens_decoder");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return JsonTypeError(path, "added_tokens_decoder", "an object", *it);
  for (const auto& [id_text, token] : it->items()) {
    int64_t id = -1;
    if (id_text.empty() || id_text.size() > 18 ||
        id_text.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": added_tokens_decoder key \"", id_text, "\" is not an id"));
    }
    id = std::stoll(id_text);
    ASSIGN_OR_RETURN(std::optional<std::string> content,
                     TokenContent(token, absl::StrCat("added_tokens_decoder.", id_text), path));
    if (!content) continue;
    AddedTokenEntry entry;
    entry.id = id;
    entry.content = *content;
    RETURN_IF_ERROR(ReadAddedTokenFlags(token, id_text, path, &entry));
    config->added_tokens_decoder.push_back(std::move(entry));
  }
  return absl::OkStatus();
}

// model_max_length (a huge value means "no limit") and extra_ids.
absl::Status ReadLimits(const Json& json, const std::string& path, TokenizerConfig* config) {
  if (auto it = json.find("model_max_length"); it != json.end() && !it->is_null()) {
    if (!it->is_number()) return JsonTypeError(path, "model_max_length", "a number", *it);
    // transformers writes int(1e30) for "no limit"; anything that does not fit is "absent".
    const double value = it->get<double>();
    if (value >= 1 && value < 1e15) config->model_max_length = static_cast<int64_t>(value);
  }
  if (auto it = json.find("extra_ids"); it != json.end()) {
    if (!it->is_number_integer()) {
      return JsonTypeError(path, "extra_ids", "a non-negative integer", *it);
    }
    if (it->get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": field 'extra_ids' must be a non-negative integer, got ", it->dump()));
    }
    config->extra_ids = it->get<int64_t>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  if (!FileExists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot open for reading"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return std::move(buffer).str();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

TokenizerFolder TokenizerFolder::OnDisk(std::string dir) {
  return TokenizerFolder(std::move(dir), /*in_memory=*/false, {});
}

TokenizerFolder TokenizerFolder::InMemory(std::string dir,
                                          std::map<std::string, absl::string_view> files) {
  return TokenizerFolder(std::move(dir), /*in_memory=*/true, std::move(files));
}

bool TokenizerFolder::Exists(const std::string& name) const {
  if (!in_memory_) return FileExists(Path(name));
  return files_.count(name) != 0;
}

absl::StatusOr<std::string> TokenizerFolder::Read(const std::string& name) const {
  if (!in_memory_) return ReadWholeFile(Path(name));
  auto it = files_.find(name);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat(Path(name), ": no such file"));
  return std::string(it->second);
}

absl::StatusOr<TokenizerConfig> LoadTokenizerConfig(const std::string& path) {
  if (!FileExists(path)) return TokenizerConfig();
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return ParseTokenizerConfig(text, path);
}

absl::StatusOr<TokenizerConfig> LoadTokenizerConfig(const TokenizerFolder& folder,
                                                    const std::string& name) {
  if (!folder.Exists(name)) return TokenizerConfig();
  ASSIGN_OR_RETURN(std::string text, folder.Read(name));
  return ParseTokenizerConfig(text, folder.Path(name));
}

absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(const std::string& text,
                                                     const std::string& path) {
  TokenizerConfig config;
  if (JsonNestingExceeds(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": nests deeper than ", kMaxJsonDepth, " levels"));
  }
  Json json = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  for (const auto& item : json.items()) config.keys.insert(item.key());
  RETURN_IF_ERROR(ReadSpecialTokens(json, path, &config));
  RETURN_IF_ERROR(ReadExtraSpecialTokens(json, path, &config));
  RETURN_IF_ERROR(ReadAddedTokensDecoder(json, path, &config));
  RETURN_IF_ERROR(ReadLimits(json, path, &config));
  return config;
}

}  // namespace ditserve::tokenizers
