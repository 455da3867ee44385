#include "models/text/causal_lm_config.h"

#include <filesystem>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::text {
namespace {

using nlohmann::json;

// Where the text fields are read from: the text sub-config first, then (Qwen2.5-VL's older layout)
// the top level. Every error names the field as a dotted path.
class TextFields {
 public:
  TextFields(std::string where, const json* text, const json* top)
      : where_(std::move(where)), text_(text), top_(top) {}

  // The field and its dotted name, or null when absent / null everywhere.
  const json* Find(const char* key, std::string* name) const {
    if (text_ != nullptr) {
      auto it = text_->find(key);
      if (it != text_->end() && !it->is_null()) {
        *name = absl::StrCat("text_config.", key);
        return &*it;
      }
    }
    if (top_ != nullptr) {
      auto it = top_->find(key);
      if (it != top_->end() && !it->is_null()) {
        *name = key;
        return &*it;
      }
    }
    return nullptr;
  }
  const std::string& where() const { return where_; }
  bool Has(const char* key) const {
    std::string name;
    return Find(key, &name) != nullptr;
  }

  absl::Status Error(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": field '", field, "' ", what));
  }

  absl::Status PositiveInt(const char* key, int64_t* out) const {
    std::string name;
    const json* v = Find(key, &name);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer() || v->get<int64_t>() <= 0) {
      return Error(name, absl::StrCat("must be a positive integer, got ", v->dump()));
    }
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status PositiveDouble(const char* key, double* out) const {
    std::string name;
    const json* v = Find(key, &name);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number() || !(v->get<double>() > 0)) {
      return Error(name, absl::StrCat("must be a positive number, got ", v->dump()));
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }

 private:
  std::string where_;
  const json* text_;
  const json* top_;
};

// RoPE: transformers 5's "rope_parameters" {rope_type, rope_theta, mrope_section} or the older
// "rope_theta" + "rope_scaling" {type | rope_type, mrope_section}. Only the default RoPE (and, for
// Qwen2.5-VL, "mrope", which transformers maps to the default one) is supported.
absl::Status ReadRope(const TextFields& f, CausalLmFamily family, CausalLmConfig* c) {
  RETURN_IF_ERROR(f.PositiveDouble("rope_theta", &c->rope_theta));
  std::string name;
  const json* params = f.Find("rope_parameters", &name);
  if (params == nullptr) params = f.Find("rope_scaling", &name);
  if (params == nullptr) {
    if (family == CausalLmFamily::kQwen25Vl) {
      return f.Error("rope_scaling", "is required for Qwen2.5-VL (its mrope_section)");
    }
    return absl::OkStatus();
  }
  if (!params->is_object()) return f.Error(name, "must be an object");
  const bool qwen = family == CausalLmFamily::kQwen25Vl;
  const std::set<std::string> known = qwen ? std::set<std::string>{"rope_type", "type", "rope_theta",
                                                                   "mrope_section"}
                                           : std::set<std::string>{"rope_type", "type", "rope_theta"};
  for (auto it = params->begin(); it != params->end(); ++it) {
    if (!known.count(it.key())) {
      return f.Error(absl::StrCat(name, ".", it.key()), "is not supported by this text encoder");
    }
  }
  for (const char* key : {"rope_type", "type"}) {
    auto t = params->find(key);
    if (t == params->end() || t->is_null()) continue;
    if (!t->is_string()) return JsonTypeError(f.where(), absl::StrCat(name, ".", key), "a string", *t);
    const std::string type = t->get<std::string>();
    if (type != "default" && !(qwen && type == "mrope")) {
      return f.Error(absl::StrCat(name, ".", key),
                     absl::StrCat("'", type, "' is not supported (only the default RoPE",
                                  qwen ? " or mrope" : "", ")"));
    }
  }
  if (auto t = params->find("rope_theta"); t != params->end() && !t->is_null()) {
    if (!t->is_number() || !(t->get<double>() > 0)) {
      return f.Error(absl::StrCat(name, ".rope_theta"), "must be a positive number");
    }
    c->rope_theta = t->get<double>();
  }
  if (qwen) {
    auto s = params->find("mrope_section");
    if (s == params->end() || !s->is_array() || s->size() != 3) {
      return f.Error(absl::StrCat(name, ".mrope_section"),
                     "must be a list of 3 positive integers (temporal, height, width)");
    }
    for (const auto& v : *s) {
      if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
        return f.Error(absl::StrCat(name, ".mrope_section"), "must hold positive integers");
      }
      c->mrope_section.push_back(v.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

// The model class: architectures[0], else the one model_type names. Wrong-typed fields are refused
// naming them (a model_type that is an object must not reach an unchecked conversion).
absl::StatusOr<std::string> ClassName(const json& j, const std::string& where) {
  if (auto arch = j.find("architectures"); arch != j.end() && !arch->is_null()) {
    if (!arch->is_array()) return JsonTypeError(where, "architectures", "a list of strings", *arch);
    if (!arch->empty()) {
      if (!(*arch)[0].is_string()) {
        return JsonTypeError(where, "architectures[0]", "a string", (*arch)[0]);
      }
      return (*arch)[0].get<std::string>();
    }
  }
  ASSIGN_OR_RETURN(const std::string type,
                   JsonFieldAt<std::string>(j, "model_type", std::string(), where));
  if (type == "mistral3") return std::string("Mistral3ForConditionalGeneration");
  if (type == "qwen2_5_vl") return std::string("Qwen2_5_VLForConditionalGeneration");
  return std::string();
}

// The family the class name names (c->class_name must be set).
absl::Status SetFamily(const std::string& where, CausalLmConfig* c) {
  if (c->class_name == "Mistral3ForConditionalGeneration") {
    c->family = CausalLmFamily::kMistral3;
  } else if (c->class_name == "Qwen2_5_VLForConditionalGeneration") {
    c->family = CausalLmFamily::kQwen25Vl;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field 'architectures' names '", c->class_name,
                     "', not a supported LLM text encoder (Mistral3ForConditionalGeneration, "
                     "Qwen2_5_VLForConditionalGeneration)"));
  }
  return absl::OkStatus();
}

// The text sub-config, or null when absent / null (which only Qwen2.5-VL allows).
absl::StatusOr<const json*> TextConfig(const json& j, const std::string& where, bool qwen) {
  const json* text = nullptr;
  if (auto t = j.find("text_config"); t != j.end() && !t->is_null()) {
    if (!t->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": field 'text_config' must be an object"));
    }
    text = &*t;
  }
  if (!qwen && text == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": field 'text_config' (the MistralConfig of the text model) is missing"));
  }
  return text;
}

// text_config.model_type, when set, must name the family's text model.
absl::Status CheckTextModelType(const TextFields& f, const json* text, bool qwen) {
  if (text == nullptr) return absl::OkStatus();
  auto mt = text->find("model_type");
  if (mt == text->end() || mt->is_null()) return absl::OkStatus();
  if (!mt->is_string()) return JsonTypeError(f.where(), "text_config.model_type", "a string", *mt);
  const std::string type = mt->get<std::string>();
  const bool ok = qwen ? (type == "qwen2_5_vl_text" || type == "qwen2_5_vl") : type == "mistral";
  if (!ok) {
    return f.Error(
        "text_config.model_type",
        absl::StrCat("is '", type, "', expected ", qwen ? "'qwen2_5_vl_text'" : "'mistral'"));
  }
  return absl::OkStatus();
}

// Class defaults: MistralConfig / Qwen2_5_VLTextConfig.
void SetClassDefaults(bool qwen, CausalLmConfig* c) {
  if (qwen) {
    c->vocab_size = 152064;
    c->hidden_size = 8192;
    c->intermediate_size = 29568;
    c->num_hidden_layers = 80;
    c->num_attention_heads = 64;
    c->num_key_value_heads = 8;
    c->max_position_embeddings = 32768;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 1000000.0;
    c->attention_bias = true;
  } else {
    c->vocab_size = 32000;
    c->hidden_size = 4096;
    c->intermediate_size = 14336;
    c->num_hidden_layers = 32;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 8;
    c->max_position_embeddings = 4096 * 32;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    c->sliding_window = 4096;
  }
}

// The sizes, rms_norm_eps and hidden_act shared by both families.
absl::Status ReadSizes(const TextFields& f, const json& j, const json* text, CausalLmConfig* c) {
  RETURN_IF_ERROR(f.PositiveInt("vocab_size", &c->vocab_size));
  RETURN_IF_ERROR(f.PositiveInt("hidden_size", &c->hidden_size));
  RETURN_IF_ERROR(f.PositiveInt("intermediate_size", &c->intermediate_size));
  RETURN_IF_ERROR(f.PositiveInt("num_hidden_layers", &c->num_hidden_layers));
  RETURN_IF_ERROR(f.PositiveInt("num_attention_heads", &c->num_attention_heads));
  {
    // Absent: the class default (8); an explicit null: multi-head attention, as both classes do.
    const json& src = text != nullptr ? *text : j;
    auto kv = src.find("num_key_value_heads");
    if (kv != src.end() && kv->is_null()) c->num_key_value_heads = c->num_attention_heads;
    RETURN_IF_ERROR(f.PositiveInt("num_key_value_heads", &c->num_key_value_heads));
  }
  RETURN_IF_ERROR(f.PositiveInt("max_position_embeddings", &c->max_position_embeddings));
  RETURN_IF_ERROR(f.PositiveDouble("rms_norm_eps", &c->rms_norm_eps));

  std::string name;
  if (const json* act = f.Find("hidden_act", &name); act != nullptr) {
    if (!act->is_string() || act->get<std::string>() != "silu") {
      return f.Error(name, absl::StrCat("is ", act->dump(), "; only \"silu\" is supported"));
    }
  }
  return absl::OkStatus();
}

// Qwen2.5-VL's head_dim and attention layout: full attention only.
absl::Status ReadQwenAttention(const TextFields& f, CausalLmConfig* c) {
  // Qwen2_5_VLAttention: head_dim = hidden_size // num_attention_heads (a "head_dim" field is
  // not used by the class).
  if (c->hidden_size % c->num_attention_heads != 0) {
    return f.Error("hidden_size",
                   absl::StrCat("(", c->hidden_size, ") must be divisible by num_attention_heads (",
                                c->num_attention_heads, ")"));
  }
  c->head_dim = c->hidden_size / c->num_attention_heads;
  std::string name;
  if (const json* sw = f.Find("use_sliding_window", &name); sw != nullptr) {
    if (!sw->is_boolean()) return f.Error(name, "must be a boolean");
    if (sw->get<bool>()) {
      return f.Error(name, "is true; sliding-window layers are not supported for Qwen2.5-VL");
    }
  }
  if (const json* lt = f.Find("layer_types", &name); lt != nullptr) {
    if (!lt->is_array()) return f.Error(name, "must be a list");
    for (const auto& t : *lt) {
      if (!t.is_string() || t.get<std::string>() != "full_attention") {
        return f.Error(name, absl::StrCat("has ", t.dump(),
                                          "; only \"full_attention\" layers "
                                          "are supported"));
      }
    }
  }
  return absl::OkStatus();
}

// Mistral's head_dim and sliding window; alternating layer types are refused.
absl::Status ReadMistralAttention(const TextFields& f, const json& text, CausalLmConfig* c) {
  c->head_dim = c->hidden_size / c->num_attention_heads;
  RETURN_IF_ERROR(f.PositiveInt("head_dim", &c->head_dim));
  // sliding_window: absent = the class default (4096), null = none.
  auto sw = text.find("sliding_window");
  if (sw != text.end()) {
    if (sw->is_null()) {
      c->sliding_window = 0;
    } else if (!sw->is_number_integer() || sw->get<int64_t>() <= 0) {
      return f.Error("text_config.sliding_window", "must be null or a positive integer");
    } else {
      c->sliding_window = sw->get<int64_t>();
    }
  }
  if (text.contains("layer_types")) {
    return f.Error("text_config.layer_types",
                   "is set; alternating attention layers are not supported for Mistral");
  }
  return absl::OkStatus();
}

// The checks across fields: grouped-query heads, an even head_dim, mrope sections that fill it.
absl::Status CheckShapes(const TextFields& f, bool qwen, const CausalLmConfig& c) {
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return f.Error(qwen ? "num_key_value_heads" : "text_config.num_key_value_heads",
                   absl::StrCat("(", c.num_key_value_heads, ") must divide num_attention_heads (",
                                c.num_attention_heads, ")"));
  }
  if (c.head_dim % 2 != 0) {
    return f.Error(qwen ? "hidden_size" : "text_config.head_dim",
                   absl::StrCat("gives a head_dim of ", c.head_dim, "; it must be even for RoPE"));
  }
  if (c.uses_mrope()) {
    const int64_t sum = std::accumulate(c.mrope_section.begin(), c.mrope_section.end(), int64_t{0});
    if (sum * 2 != c.head_dim) {
      return f.Error("rope_scaling.mrope_section",
                     absl::StrCat("[", absl::StrJoin(c.mrope_section, ", "), "] sums to ", sum,
                                  "; it must be head_dim / 2 = ", c.head_dim / 2));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CausalLmConfig> Parse(const json& j, const std::string& where) {
  CausalLmConfig c;
  ASSIGN_OR_RETURN(c.class_name, ClassName(j, where));
  RETURN_IF_ERROR(SetFamily(where, &c));
  const bool qwen = c.family == CausalLmFamily::kQwen25Vl;
  ASSIGN_OR_RETURN(const json* text, TextConfig(j, where, qwen));
  // Mistral3 reads the text model from text_config alone; Qwen2.5-VL falls back to the top level.
  TextFields f(where, text, qwen ? &j : nullptr);
  RETURN_IF_ERROR(CheckTextModelType(f, text, qwen));

  SetClassDefaults(qwen, &c);
  RETURN_IF_ERROR(ReadSizes(f, j, text, &c));
  if (qwen) {
    RETURN_IF_ERROR(ReadQwenAttention(f, &c));
  } else {
    RETURN_IF_ERROR(ReadMistralAttention(f, *text, &c));
  }
  RETURN_IF_ERROR(ReadRope(f, c.family, &c));
  if (qwen) {
    ASSIGN_OR_RETURN(c.image_token_id,
                     JsonFieldAt<int64_t>(j, "image_token_id", int64_t{151655}, where));
  }
  RETURN_IF_ERROR(CheckShapes(f, qwen, c));
  return c;
}

}  // namespace

absl::StatusOr<CausalLmConfig> ParseCausalLmConfig(const std::string& json_text,
                                                   const std::string& where) {
  auto j = ParseJsonObject(json_text);
  if (!j.ok()) return absl::Status(j.status().code(), absl::StrCat(where, ": ", j.status().message()));
  return Parse(*j, where);
}

absl::StatusOr<CausalLmConfig> CausalLmConfigFromJson(const nlohmann::json& j,
                                                      const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  return Parse(j, where);
}

absl::StatusOr<CausalLmConfig> LoadCausalLmConfig(const std::string& path) {
  std::error_code ec;
  const std::string file =
      std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));
  return ParseCausalLmConfig(text, file);
}

}  // namespace ditserve::text
