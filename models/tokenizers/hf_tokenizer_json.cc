#include "models/tokenizers/hf_tokenizer_json.h"

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {
namespace {

using Json = nlohmann::json;

// Errors of one file, each naming the JSON field it is about.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  absl::Status Error(const std::string& where, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", where, ": ", what));
  }

  static std::string Field(const std::string& where, absl::string_view key) {
    return where.empty() ? std::string(key) : absl::StrCat(where, ".", key);
  }
  static std::string Index(const std::string& where, size_t i) {
    return absl::StrCat(where, "[", i, "]");
  }

  // obj[key], which must be present and not null.
  absl::StatusOr<const Json*> Required(const Json& obj, const char* key,
                                       const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Error(Field(where, key), "missing");
    return &*it;
  }

  absl::StatusOr<std::string> String(const Json& obj, const char* key,
                                     const std::string& where) const {
    ASSIGN_OR_RETURN(const Json* value, Required(obj, key, where));
    if (!value->is_string()) {
      return Error(Field(where, key),
                   absl::StrCat("expected a string, got ", JsonTypePhrase(*value)));
    }
    return value->get<std::string>();
  }

  absl::StatusOr<std::optional<std::string>> OptionalString(const Json& obj, const char* key,
                                                            const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::optional<std::string>();
    if (!it->is_string()) {
      return Error(Field(where, key), absl::StrCat("expected a string, got ", JsonTypePhrase(*it)));
    }
    return std::optional<std::string>(it->get<std::string>());
  }

  absl::StatusOr<bool> Bool(const Json& obj, const char* key, const std::string& where,
                            bool fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      return Error(Field(where, key),
                   absl::StrCat("expected a boolean, got ", JsonTypePhrase(*it)));
    }
    return it->get<bool>();
  }

  absl::StatusOr<int64_t> Id(const Json& value, const std::string& where) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > INT32_MAX) {
      return Error(where, absl::StrCat("expected an id in [0, 2^31), got ", value.dump()));
    }
    return value.get<int64_t>();
  }

  absl::StatusOr<const Json*> Array(const Json& obj, const char* key,
                                    const std::string& where) const {
    ASSIGN_OR_RETURN(const Json* value, Required(obj, key, where));
    if (!value->is_array()) {
      return Error(Field(where, key),
                   absl::StrCat("expected an array, got ", JsonTypePhrase(*value)));
    }
    return value;
  }

  // A component: an object with a string "type".
  absl::StatusOr<std::string> Type(const Json& component, const std::string& where) const {
    if (!component.is_object()) {
      return Error(where, absl::StrCat("expected an object, got ", JsonTypePhrase(component)));
    }
    return String(component, "type", where);
  }

  absl::Status Unsupported(const std::string& where, absl::string_view kind,
                           absl::string_view type, absl::string_view supported) const {
    return Error(Field(where, "type"), absl::StrCat(kind, " type \"", type,
                                                    "\" is not supported (supported: ",
                                                    supported, ")"));
  }

 private:
  std::string path_;
};

// {"String": "..."} or {"Regex": "..."}.
absl::StatusOr<Pcre2Regex> ReadPattern(const Reader& r, const Json& owner,
                                       const std::string& where) {
  const std::string field = Reader::Field(where, "pattern");
  ASSIGN_OR_RETURN(const Json* pattern, r.Required(owner, "pattern", where));
  if (!pattern->is_object() || pattern->size() != 1) {
    return r.Error(field, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  const std::string kind = pattern->begin().key();
  const Json& value = pattern->begin().value();
  if (!value.is_string() || (kind != "String" && kind != "Regex")) {
    return r.Error(field, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  auto compiled = kind == "Regex" ? Pcre2Regex::Compile(value.get<std::string>())
                                  : Pcre2Regex::CompileLiteral(value.get<std::string>());
  if (!compiled.ok()) return r.Error(Reader::Field(field, kind), compiled.status().message());
  return std::move(*compiled);
}

absl::Status ReadNormalizer(const Reader& r, const Json& j, const std::string& where,
                            HfNormalizer* out) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, r.Type(j, where));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* steps, r.Array(j, "normalizers", where));
    for (size_t i = 0; i < steps->size(); ++i) {
      RETURN_IF_ERROR(ReadNormalizer(
          r, (*steps)[i], Reader::Index(Reader::Field(where, "normalizers"), i), out));
    }
  } else if (type == "NFC") {
    out->AddNfc();
  } else if (type == "Lowercase") {
    out->AddLowercase();
  } else if (type == "Replace") {
    ASSIGN_OR_RETURN(Pcre2Regex pattern, ReadPattern(r, j, where));
    ASSIGN_OR_RETURN(std::string content, r.String(j, "content", where));
    out->AddReplace(std::move(pattern), std::move(content));
  } else {
    return r.Unsupported(where, "normalizer", type, "null, NFC, Lowercase, Replace, Sequence");
  }
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> ReadBehavior(const Reader& r, const Json& j,
                                           const std::string& where) {
  ASSIGN_OR_RETURN(const std::string name, r.String(j, "behavior", where));
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [known, behavior] : kNames) {
    if (name == known) return behavior;
  }
  return r.Error(Reader::Field(where, "behavior"),
                 absl::StrCat("unknown split behavior \"", name,
                              "\" (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                              "Contiguous)"));
}

absl::Status ReadPreTokenizer(const Reader& r, const Json& j, const std::string& where,
                              HfPreTokenizer* out) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, r.Type(j, where));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* steps, r.Array(j, "pretokenizers", where));
    for (size_t i = 0; i < steps->size(); ++i) {
      RETURN_IF_ERROR(ReadPreTokenizer(
          r, (*steps)[i], Reader::Index(Reader::Field(where, "pretokenizers"), i), out));
    }
  } else if (type == "Split") {
    ASSIGN_OR_RETURN(Pcre2Regex pattern, ReadPattern(r, j, where));
    ASSIGN_OR_RETURN(const SplitBehavior behavior, ReadBehavior(r, j, where));
    ASSIGN_OR_RETURN(const bool invert, r.Bool(j, "invert", where, false));
    out->AddSplit(std::move(pattern), behavior, invert);
  } else if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(const bool add_prefix_space, r.Bool(j, "add_prefix_space", where, true));
    ASSIGN_OR_RETURN(const bool use_regex, r.Bool(j, "use_regex", where, true));
    RETURN_IF_ERROR(out->AddByteLevel(add_prefix_space, use_regex));
  } else {
    return r.Unsupported(where, "pre-tokenizer", type, "null, Split, ByteLevel, Sequence");
  }
  return absl::OkStatus();
}

absl::StatusOr<BpeMerges> ReadMerges(const Reader& r, const Json& merges,
                                     const std::string& where) {
  BpeMerges out;
  out.reserve(merges.size());
  bool strings = false;
  bool pairs = false;
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    const std::string at = Reader::Index(where, i);
    if (m.is_string()) {
      strings = true;
      const std::string text = m.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return r.Error(at, absl::StrCat("expected \"left right\" (one space), got \"", text, "\""));
      }
      out.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pairs = true;
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return r.Error(at, absl::StrCat("expected \"left right\" or [left, right], got ", m.dump()));
    }
    if (strings && pairs) {
      return r.Error(at, "merges mix \"left right\" strings and [left, right] pairs");
    }
  }
  return out;
}

absl::StatusOr<BpeModel> ReadModel(const Reader& r, const Json& root) {
  const std::string where = "model";
  ASSIGN_OR_RETURN(const Json* model, r.Required(root, "model", ""));
  ASSIGN_OR_RETURN(const std::string type, r.Type(*model, where));
  if (type != "BPE") return r.Unsupported(where, "model", type, "BPE");

  if (auto it = model->find("dropout"); it != model->end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > 1) {
      return r.Error("model.dropout", "expected null or a number in [0, 1]");
    }
    if (it->get<double>() > 0) {
      return r.Error("model.dropout", "BPE dropout (random merges) is not supported");
    }
  }
  BpeOptions options;
  ASSIGN_OR_RETURN(options.unk_token, r.OptionalString(*model, "unk_token", where));
  ASSIGN_OR_RETURN(std::optional<std::string> prefix,
                   r.OptionalString(*model, "continuing_subword_prefix", where));
  ASSIGN_OR_RETURN(std::optional<std::string> suffix,
                   r.OptionalString(*model, "end_of_word_suffix", where));
  options.continuing_subword_prefix = prefix.value_or("");
  options.end_of_word_suffix = suffix.value_or("");
  ASSIGN_OR_RETURN(options.fuse_unk, r.Bool(*model, "fuse_unk", where, false));
  ASSIGN_OR_RETURN(options.byte_fallback, r.Bool(*model, "byte_fallback", where, false));
  ASSIGN_OR_RETURN(options.ignore_merges, r.Bool(*model, "ignore_merges", where, false));

  ASSIGN_OR_RETURN(const Json* vocab_json, r.Required(*model, "vocab", where));
  if (!vocab_json->is_object()) {
    return r.Error("model.vocab",
                   absl::StrCat("expected an object token -> id, got ", JsonTypePhrase(*vocab_json)));
  }
  BpeVocab vocab;
  vocab.reserve(vocab_json->size());
  for (const auto& [token, id] : vocab_json->items()) {
    ASSIGN_OR_RETURN(vocab[token], r.Id(id, absl::StrCat("model.vocab[\"", token, "\"]")));
  }
  ASSIGN_OR_RETURN(const Json* merges_json, r.Array(*model, "merges", where));
  ASSIGN_OR_RETURN(BpeMerges merges, ReadMerges(r, *merges_json, "model.merges"));
  return BpeModel::Create(std::move(vocab), merges, std::move(options),
                          absl::StrCat(r.path(), ": model.vocab"), [&](size_t i) {
                            return absl::StrCat(r.path(), ": model.merges[", i, "]");
                          });
}

absl::Status ReadAddedTokens(const Reader& r, const Json& root, const BpeModel& model,
                             HfAddedVocabulary* out) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) {
    return r.Error("added_tokens", absl::StrCat("expected an array, got ", JsonTypePhrase(*it)));
  }
  std::vector<HfAddedToken> tokens;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& entry = (*it)[i];
    const std::string where = Reader::Index("added_tokens", i);
    if (!entry.is_object()) {
      return r.Error(where, absl::StrCat("expected an object, got ", JsonTypePhrase(entry)));
    }
    HfAddedToken token;
    ASSIGN_OR_RETURN(token.content, r.String(entry, "content", where));
    ASSIGN_OR_RETURN(const Json* id, r.Required(entry, "id", where));
    RETURN_IF_ERROR(r.Id(*id, Reader::Field(where, "id")).status());
    ASSIGN_OR_RETURN(token.special, r.Bool(entry, "special", where, false));
    ASSIGN_OR_RETURN(token.single_word, r.Bool(entry, "single_word", where, false));
    ASSIGN_OR_RETURN(token.lstrip, r.Bool(entry, "lstrip", where, false));
    ASSIGN_OR_RETURN(token.rstrip, r.Bool(entry, "rstrip", where, false));
    ASSIGN_OR_RETURN(token.normalized, r.Bool(entry, "normalized", where, true));
    tokens.push_back(std::move(token));
  }
  // One add_tokens call, as the reference's deserialiser makes (ids follow its rule).
  out->Add(tokens, model);
  return absl::OkStatus();
}

// A TemplateProcessing template: [{"SpecialToken": {"id": ...}} | {"Sequence": {"id": "A"}}].
absl::StatusOr<HfPostProcessor> ReadTemplate(const Reader& r, const Json& processor,
                                             const char* key, const std::string& where,
                                             const Json& special_tokens, bool single) {
  ASSIGN_OR_RETURN(const Json* pieces, r.Array(processor, key, where));
  std::vector<HfPostProcessor::Piece> out;
  for (size_t i = 0; i < pieces->size(); ++i) {
    const Json& piece = (*pieces)[i];
    const std::string at = Reader::Index(Reader::Field(where, key), i);
    if (!piece.is_object() || piece.size() != 1) {
      return r.Error(at, "expected {\"SpecialToken\": {...}} or {\"Sequence\": {...}}");
    }
    const std::string kind = piece.begin().key();
    const Json& body = piece.begin().value();
    if (!body.is_object()) return r.Error(Reader::Field(at, kind), "expected an object");
    ASSIGN_OR_RETURN(const std::string id, r.String(body, "id", Reader::Field(at, kind)));
    if (kind == "Sequence") {
      if (id != "A" && id != "B") {
        return r.Error(Reader::Field(Reader::Field(at, kind), "id"), "expected \"A\" or \"B\"");
      }
      if (single && id == "B") {
        return r.Error(at, "the single-sequence template uses sequence B");
      }
      out.push_back(HfPostProcessor::Piece{true, {}});
    } else if (kind == "SpecialToken") {
      auto special = special_tokens.find(id);
      if (special == special_tokens.end() || !special->is_object()) {
        return r.Error(at, absl::StrCat("special token \"", id, "\" is not in ",
                                        Reader::Field(where, "special_tokens")));
      }
      const std::string special_where =
          absl::StrCat(Reader::Field(where, "special_tokens"), "[\"", id, "\"]");
      ASSIGN_OR_RETURN(const Json* ids, r.Array(*special, "ids", special_where));
      HfPostProcessor::Piece fixed;
      for (size_t k = 0; k < ids->size(); ++k) {
        ASSIGN_OR_RETURN(const int64_t value,
                         r.Id((*ids)[k], Reader::Index(Reader::Field(special_where, "ids"), k)));
        fixed.ids.push_back(value);
      }
      if (auto tokens = special->find("tokens");
          tokens != special->end() && tokens->is_array() && tokens->size() != ids->size()) {
        return r.Error(special_where, "\"ids\" and \"tokens\" differ in length");
      }
      out.push_back(std::move(fixed));
    } else {
      return r.Error(at, absl::StrCat("unknown template piece \"", kind,
                                      "\" (SpecialToken, Sequence)"));
    }
  }
  return HfPostProcessor(std::move(out));
}

// RobertaProcessing / BertProcessing: "cls": [token, id], "sep": [token, id].
absl::StatusOr<int64_t> ReadTokenIdPair(const Reader& r, const Json& processor, const char* key,
                                        const std::string& where) {
  ASSIGN_OR_RETURN(const Json* pair, r.Array(processor, key, where));
  if (pair->size() != 2 || !(*pair)[0].is_string()) {
    return r.Error(Reader::Field(where, key), "expected [token, id]");
  }
  return r.Id((*pair)[1], Reader::Index(Reader::Field(where, key), 1));
}

absl::StatusOr<HfPostProcessor> ReadPostProcessor(const Reader& r, const Json& j,
                                                  const std::string& where) {
  if (j.is_null()) return HfPostProcessor();
  ASSIGN_OR_RETURN(const std::string type, r.Type(j, where));
  if (type == "ByteLevel") return HfPostProcessor();  // offsets only
  if (type == "TemplateProcessing") {
    ASSIGN_OR_RETURN(const Json* special_tokens, r.Required(j, "special_tokens", where));
    if (!special_tokens->is_object()) {
      return r.Error(Reader::Field(where, "special_tokens"), "expected an object");
    }
    if (auto pair = j.find("pair"); pair != j.end() && !pair->is_null()) {
      // Only checked (the reference refuses templates naming unknown special tokens).
      RETURN_IF_ERROR(ReadTemplate(r, j, "pair", where, *special_tokens, false).status());
    }
    return ReadTemplate(r, j, "single", where, *special_tokens, true);
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    ASSIGN_OR_RETURN(const int64_t cls, ReadTokenIdPair(r, j, "cls", where));
    ASSIGN_OR_RETURN(const int64_t sep, ReadTokenIdPair(r, j, "sep", where));
    return HfPostProcessor(
        {HfPostProcessor::Piece{false, {cls}}, HfPostProcessor::Piece{true, {}},
         HfPostProcessor::Piece{false, {sep}}});
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* processors, r.Array(j, "processors", where));
    HfPostProcessor combined;
    for (size_t i = 0; i < processors->size(); ++i) {
      ASSIGN_OR_RETURN(HfPostProcessor next,
                       ReadPostProcessor(r, (*processors)[i],
                                         Reader::Index(Reader::Field(where, "processors"), i)));
      combined = combined.Then(next);
    }
    return combined;
  }
  return r.Unsupported(where, "post-processor", type,
                       "null, ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, "
                       "Sequence");
}

}  // namespace

absl::StatusOr<HfTokenizer::Parts> ReadHfTokenizerJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  return ParseHfTokenizerJson(text, path);
}

absl::StatusOr<HfTokenizer::Parts> ParseHfTokenizerJson(const std::string& text,
                                                        const std::string& path) {
  // Deeper documents are refused before parsing: messages dump() values, which recurses per level.
  if (JsonNestingExceeds(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": nests deeper than ", kMaxJsonDepth, " levels"));
  }
  const Json root = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  const Reader r(path);
  if (auto version = root.find("version"); version != root.end() && !version->is_null()) {
    if (!version->is_string() || version->get<std::string>() != "1.0") {
      return r.Error("version", absl::StrCat("unknown tokenizer.json version ", version->dump(),
                                             " (expected \"1.0\")"));
    }
  }
  static const Json kNull;
  auto member = [&](const char* key) -> const Json& {
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };

  ASSIGN_OR_RETURN(BpeModel model, ReadModel(r, root));
  HfTokenizer::Parts parts(std::move(model));
  parts.source = path;
  RETURN_IF_ERROR(ReadNormalizer(r, member("normalizer"), "normalizer", &parts.normalizer));
  RETURN_IF_ERROR(
      ReadPreTokenizer(r, member("pre_tokenizer"), "pre_tokenizer", &parts.pre_tokenizer));
  ASSIGN_OR_RETURN(parts.post_processor,
                   ReadPostProcessor(r, member("post_processor"), "post_processor"));
  RETURN_IF_ERROR(ReadAddedTokens(r, root, parts.model, &parts.added));
  return parts;
}

}  // namespace ditserve::tokenizers
