#include "models/tokenizers/t5_tokenizer.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/tokenizers/spm_model_proto.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {
namespace {

using Json = nlohmann::json;

// Finds the Metaspace pre-tokenizer (alone or inside a Sequence); null if there is none. *field is
// its path in tokenizer.json ("pre_tokenizer", "pre_tokenizer.pretokenizers[1]").
const Json* FindMetaspace(const Json& pre_tokenizer, const std::string& where, std::string* field) {
  if (!pre_tokenizer.is_object()) return nullptr;
  if (auto type = pre_tokenizer.find("type");
      type != pre_tokenizer.end() && type->is_string() && type->get<std::string>() == "Metaspace") {
    *field = where;
    return &pre_tokenizer;
  }
  auto it = pre_tokenizer.find("pretokenizers");
  if (it == pre_tokenizer.end() || !it->is_array()) return nullptr;
  for (size_t i = 0; i < it->size(); ++i) {
    if (const Json* found =
            FindMetaspace((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]"), field)) {
      return found;
    }
  }
  return nullptr;
}

// Reads tokenizer.json: its added tokens, after checking that it describes the same unigram model
// as spiece.model with a word-initial "▁" on every word (what SentencePiece's dummy prefix does).
absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> ReadTokenizerJson(
    const std::string& path, const UnigramModel& model, const std::string& model_path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  if (JsonNestingExceeds(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": nests deeper than ", kMaxJsonDepth, " levels"));
  }
  const Json json = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  std::vector<std::pair<std::string, int64_t>> added;
  if (auto it = json.find("added_tokens"); it != json.end() && !it->is_null()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"added_tokens\" is not an array"));
    }
    for (const Json& token : *it) {
      if (!token.is_object() || !token.contains("content") || !token["content"].is_string() ||
          !token.contains("id") || !token["id"].is_number_integer() ||
          token["id"].get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": an added token lacks a string \"content\" or an integer \"id\""));
      }
      added.emplace_back(token["content"].get<std::string>(), token["id"].get<int64_t>());
    }
  }
  if (auto it = json.find("model"); it != json.end() && it->is_object() &&
                                    it->contains("type") && (*it)["type"].is_string() &&
                                    (*it)["type"].get<std::string>() == "Unigram" &&
                                    it->contains("vocab")) {
    const Json& vocab = (*it)["vocab"];
    if (!vocab.is_array() || vocab.size() < model.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": unigram vocabulary is smaller than the ", model.size(), " pieces of ",
          model_path));
    }
    for (size_t id = 0; id < model.size(); ++id) {
      const Json& entry = vocab[id];
      if (!entry.is_array() || entry.empty() || !entry[0].is_string() ||
          entry[0].get<std::string>() != model.IdToPiece(id)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": unigram vocabulary differs from ", model_path, " at id ", id));
      }
    }
  }
  if (auto it = json.find("pre_tokenizer"); it != json.end()) {
    std::string field;
    if (const Json* metaspace = FindMetaspace(*it, "pre_tokenizer", &field)) {
      ASSIGN_OR_RETURN(const std::string scheme,
                       JsonFieldAt<std::string>(*metaspace, "prepend_scheme", "always", path, field));
      ASSIGN_OR_RETURN(const bool prefix,
                       JsonFieldAt<bool>(*metaspace, "add_prefix_space", true, path, field));
      if (scheme != "always" || !prefix) {
        return absl::UnimplementedError(absl::StrCat(
            path, ": Metaspace prepend_scheme \"", scheme,
            "\" is not supported (only \"always\", the T5 default)"));
      }
    }
  }
  return added;
}

// Special tokens from tokenizer_config.json alone: SentencePiece's own pieces where it has them,
// <extra_id_N> after the pieces in reverse order (transformers' T5 convention).
absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> DeriveAddedTokens(
    const TokenizerConfig& config, const std::vector<std::string>& specials,
    const UnigramModel& model, const std::string& config_path) {
  int64_t extra_ids = 0;
  for (const std::string& token : config.extra_special_tokens) {
    if (absl::StartsWith(token, "<extra_id_")) ++extra_ids;
  }
  if (config.extra_ids) extra_ids = std::max(extra_ids, *config.extra_ids);
  std::vector<std::string> all = specials;
  all.insert(all.end(), config.extra_special_tokens.begin(), config.extra_special_tokens.end());
  std::vector<std::pair<std::string, int64_t>> added;
  for (const std::string& token : all) {
    if (auto id = model.PieceToId(token)) {
      added.emplace_back(token, *id);
      continue;
    }
    absl::string_view digits = token;
    int64_t n = -1;
    if (absl::ConsumePrefix(&digits, "<extra_id_") && absl::ConsumeSuffix(&digits, ">") &&
        absl::SimpleAtoi(digits, &n) && n >= 0 && n < extra_ids) {
      added.emplace_back(token, static_cast<int64_t>(model.size()) + extra_ids - 1 - n);
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": special token \"", token, "\" is neither a SentencePiece piece nor an ",
        "<extra_id_N> with N < extra_ids"));
  }
  return added;
}

}  // namespace

T5Tokenizer::T5Tokenizer() = default;
T5Tokenizer::T5Tokenizer(T5Tokenizer&&) noexcept = default;
T5Tokenizer& T5Tokenizer::operator=(T5Tokenizer&&) noexcept = default;
T5Tokenizer::~T5Tokenizer() = default;

absl::StatusOr<T5Tokenizer> T5Tokenizer::Load(const std::string& tokenizer_dir) {
  const std::string model_path = JoinPath(tokenizer_dir, "spiece.model");
  const std::string config_path = JoinPath(tokenizer_dir, "tokenizer_config.json");
  const std::string json_path = JoinPath(tokenizer_dir, "tokenizer.json");
  if (!FileExists(model_path)) {
    return absl::NotFoundError(absl::StrCat(model_path, ": no such file"));
  }
  T5Tokenizer tokenizer;
  ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(model_path));
  ASSIGN_OR_RETURN(const SpmModelProto proto, ParseSpmModelProto(bytes, model_path));
  if (proto.model_type != 1) {
    return absl::UnimplementedError(absl::StrCat(
        model_path, ": model_type ", proto.model_type, " is not supported (only 1 = UNIGRAM)"));
  }
  if (proto.byte_fallback || proto.treat_whitespace_as_suffix) {
    return absl::UnimplementedError(absl::StrCat(
        model_path, ": byte_fallback / treat_whitespace_as_suffix are not supported"));
  }
  ASSIGN_OR_RETURN(tokenizer.normalizer_, SpmNormalizer::Create(proto, model_path));
  ASSIGN_OR_RETURN(tokenizer.unigram_, UnigramModel::Create(proto, model_path));
  const UnigramModel& model = tokenizer.unigram_;

  ASSIGN_OR_RETURN(TokenizerConfig config, LoadTokenizerConfig(config_path));
  const std::string eos = config.eos_token.value_or("</s>");
  const std::string pad = config.pad_token.value_or("<pad>");
  const std::string unk = config.unk_token.value_or("<unk>");

  std::vector<std::pair<std::string, int64_t>> added;
  if (FileExists(json_path)) {
    ASSIGN_OR_RETURN(added, ReadTokenizerJson(json_path, model, model_path));
  } else if (!config.added_tokens_decoder.empty()) {
    for (const AddedTokenEntry& entry : config.added_tokens_decoder) {
      added.emplace_back(entry.content, entry.id);
    }
  } else {
    ASSIGN_OR_RETURN(added, DeriveAddedTokens(config, {eos, pad, unk}, model, config_path));
  }

  absl::flat_hash_map<std::string, int64_t> added_ids;
  size_t vocab_size = model.size();
  for (const auto& [content, id] : added) {
    added_ids.emplace(content, id);
    vocab_size = std::max(vocab_size, static_cast<size_t>(id) + 1);
  }
  auto resolve = [&](const std::string& token) -> absl::StatusOr<int64_t> {
    if (auto it = added_ids.find(token); it != added_ids.end()) return it->second;
    if (auto id = model.PieceToId(token)) return *id;
    return absl::InvalidArgumentError(absl::StrCat(
        model_path, ": special token \"", token, "\" is neither a piece nor an added token"));
  };
  ASSIGN_OR_RETURN(tokenizer.eos_id_, resolve(eos));
  ASSIGN_OR_RETURN(tokenizer.pad_id_, resolve(pad));
  ASSIGN_OR_RETURN(tokenizer.unk_id_, resolve(unk));
  // Specials from the config are split out of the text even when tokenizer.json omits them.
  added.emplace_back(eos, tokenizer.eos_id_);
  added.emplace_back(pad, tokenizer.pad_id_);
  added.emplace_back(unk, tokenizer.unk_id_);
  tokenizer.added_ = AddedTokens(std::move(added));
  tokenizer.vocab_size_ = vocab_size;
  if (config.model_max_length && *config.model_max_length >= 1 &&
      *config.model_max_length <= (1 << 20)) {
    tokenizer.model_max_length_ = static_cast<int>(*config.model_max_length);
  }
  return tokenizer;
}

std::vector<int64_t> T5Tokenizer::Tokenize(absl::string_view text) const {
  std::vector<int64_t> ids;
  for (const AddedTokens::Piece& piece : added_.Split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    unigram_.Encode(normalizer_.Normalize(piece.text), &ids);
  }
  return ids;
}

std::vector<int64_t> T5Tokenizer::EncodeUnpadded(absl::string_view text) const {
  std::vector<int64_t> ids = Tokenize(text);
  ids.push_back(eos_id_);
  return ids;
}

std::vector<int64_t> T5Tokenizer::Encode(absl::string_view text, int max_length, bool pad) const {
  const size_t length = static_cast<size_t>(std::max(max_length, 1));
  std::vector<int64_t> ids = Tokenize(text);
  if (ids.size() > length - 1) ids.resize(length - 1);
  ids.push_back(eos_id_);
  if (pad) ids.resize(length, pad_id_);
  return ids;
}

}  // namespace ditserve::tokenizers
