#include "sharding/tp_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::sharding {
namespace {

// Reads a positive integer field of config.json, or its class default when absent.
absl::StatusOr<int64_t> ConfigInt(const nlohmann::json& config, const char* key, int64_t dflt) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: '", key, "' must be a positive integer"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> ConfigDouble(const nlohmann::json& config, const char* key, double dflt) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return dflt;
  if (!it->is_number() || !(it->get<double>() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: '", key, "' must be a positive number"));
  }
  return it->get<double>();
}

// The eight attention entries shared by the dual-stream blocks of all three models.
void AddDualStreamAttention(std::vector<TpRule>* rules) {
  for (const char* m : {"to_q", "to_k", "to_v"}) {
    rules->push_back({absl::StrCat("transformer_blocks.*.attn.", m), TpStyle::kColwise, {}});
  }
  rules->push_back({"transformer_blocks.*.attn.to_out.0", TpStyle::kRowwise, {}});
  for (const char* m : {"add_q_proj", "add_k_proj", "add_v_proj"}) {
    rules->push_back({absl::StrCat("transformer_blocks.*.attn.", m), TpStyle::kColwise, {}});
  }
  rules->push_back({"transformer_blocks.*.attn.to_add_out", TpStyle::kRowwise, {}});
}

constexpr absl::string_view kTransformers5TextPrefix = "model.language_model.";

bool IsTextEncoderClass(absl::string_view class_name) {
  return class_name == "Mistral3ForConditionalGeneration" ||
         class_name == "Qwen2_5_VLForConditionalGeneration";
}

// transformers' base_model_tp_plan of MistralConfig / Qwen2_5_VLTextConfig, under `prefix`.
void AddDecoderOnlyTextModel(const std::string& prefix, std::vector<TpRule>* rules) {
  for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
    rules->push_back({absl::StrCat(prefix, "layers.*.self_attn.", m), TpStyle::kColwise, {}});
  }
  rules->push_back({absl::StrCat(prefix, "layers.*.self_attn.o_proj"), TpStyle::kRowwise, {}});
  rules->push_back({absl::StrCat(prefix, "layers.*.mlp.gate_proj"), TpStyle::kColwise, {}});
  rules->push_back({absl::StrCat(prefix, "layers.*.mlp.up_proj"), TpStyle::kColwise, {}});
  rules->push_back({absl::StrCat(prefix, "layers.*.mlp.down_proj"), TpStyle::kRowwise, {}});
}

}  // namespace

std::vector<std::string> TextModelPrefixes(absl::string_view class_name) {
  if (class_name == "Mistral3ForConditionalGeneration") {
    return {std::string(kTransformers5TextPrefix), "language_model.model."};
  }
  if (class_name == "Qwen2_5_VLForConditionalGeneration") {
    return {std::string(kTransformers5TextPrefix), "model."};
  }
  return {};
}

absl::StatusOr<std::string> DetectTextModelPrefix(
    absl::string_view class_name, const std::function<bool(const std::string&)>& has_tensor) {
  const std::vector<std::string> prefixes = TextModelPrefixes(class_name);
  std::vector<std::string> looked_for;
  for (const std::string& p : prefixes) {
    looked_for.push_back(p + "embed_tokens.weight");
    if (has_tensor(looked_for.back())) return p;
  }
  if (prefixes.empty()) {
    return absl::NotFoundError(
        absl::StrCat("'", class_name, "' is not a vision-language class with a text model"));
  }
  return absl::NotFoundError(absl::StrCat(
      "no text model found in this ", class_name, " checkpoint: it has none of ",
      absl::StrJoin(looked_for, ", ")));
}

std::string ConfigClassName(const nlohmann::json& config) {
  if (!config.is_object()) return "";
  auto cls = config.find("_class_name");
  if (cls != config.end() && cls->is_string()) return cls->get<std::string>();
  auto arch = config.find("architectures");
  if (arch != config.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
    return (*arch)[0].get<std::string>();
  }
  return "";
}

const TpRule* TpPlan::Find(absl::string_view key) const {
  for (const auto& r : rules) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

absl::StatusOr<TpStyle> ParseTpStyle(absl::string_view name) {
  for (TpStyle s : {TpStyle::kColwise, TpStyle::kRowwise, TpStyle::kRowwiseSplitInput,
                    TpStyle::kPackedColwise, TpStyle::kPackedRowwise}) {
    if (TpStyleName(s) == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "Unsupported tensor-parallel style '", name,
      "'. Expected colwise, rowwise, rowwise_split_input, packed_colwise or packed_rowwise."));
}

absl::StatusOr<TpPlan> BuiltinTpPlan(absl::string_view class_name, const nlohmann::json& config) {
  return BuiltinTpPlan(class_name, config, kTransformers5TextPrefix);
}

absl::StatusOr<TpPlan> BuiltinTpPlan(absl::string_view class_name, const nlohmann::json& config,
                                     absl::string_view text_model_prefix) {
  TpPlan plan;
  plan.model_class = std::string(class_name);
  auto& rules = plan.rules;
  if (class_name == "FluxTransformer2DModel") {
    ASSIGN_OR_RETURN(int64_t heads, ConfigInt(config, "num_attention_heads", 24));
    ASSIGN_OR_RETURN(int64_t head_dim, ConfigInt(config, "attention_head_dim", 128));
    const int64_t d = heads * head_dim;
    // FluxSingleTransformerBlock hard-codes mlp_ratio 4.0.
    const int64_t mlp = static_cast<int64_t>(static_cast<double>(d) * 4.0);
    AddDualStreamAttention(&rules);
    rules.push_back({"transformer_blocks.*.ff.net.0.proj", TpStyle::kColwise, {}});
    rules.push_back({"transformer_blocks.*.ff.net.2", TpStyle::kRowwise, {}});
    rules.push_back({"transformer_blocks.*.ff_context.net.0.proj", TpStyle::kColwise, {}});
    rules.push_back({"transformer_blocks.*.ff_context.net.2", TpStyle::kRowwise, {}});
    for (const char* m : {"to_q", "to_k", "to_v"}) {
      rules.push_back({absl::StrCat("single_transformer_blocks.*.attn.", m), TpStyle::kColwise, {}});
    }
    rules.push_back({"single_transformer_blocks.*.proj_mlp", TpStyle::kColwise, {}});
    rules.push_back({"single_transformer_blocks.*.proj_out", TpStyle::kPackedRowwise, {d, mlp}});
    return plan;
  }
  if (class_name == "Flux2Transformer2DModel" || class_name == "Flux2TransformerModel") {
    ASSIGN_OR_RETURN(int64_t heads, ConfigInt(config, "num_attention_heads", 48));
    ASSIGN_OR_RETURN(int64_t head_dim, ConfigInt(config, "attention_head_dim", 128));
    ASSIGN_OR_RETURN(double mlp_ratio, ConfigDouble(config, "mlp_ratio", 3.0));
    const int64_t d = heads * head_dim;
    // int(D * mlp_ratio), as Python truncates.
    const int64_t mh = static_cast<int64_t>(static_cast<double>(d) * mlp_ratio);
    AddDualStreamAttention(&rules);
    rules.push_back({"transformer_blocks.*.ff.linear_in", TpStyle::kPackedColwise, {1, 1}});
    rules.push_back({"transformer_blocks.*.ff.linear_out", TpStyle::kRowwise, {}});
    rules.push_back({"transformer_blocks.*.ff_context.linear_in", TpStyle::kPackedColwise, {1, 1}});
    rules.push_back({"transformer_blocks.*.ff_context.linear_out", TpStyle::kRowwise, {}});
    rules.push_back({"single_transformer_blocks.*.attn.to_qkv_mlp_proj", TpStyle::kPackedColwise,
                     {d, d, d, mh, mh}});
    rules.push_back({"single_transformer_blocks.*.attn.to_out", TpStyle::kPackedRowwise, {d, mh}});
    return plan;
  }
  if (class_name == "QwenImageTransformer2DModel") {
    AddDualStreamAttention(&rules);
    rules.push_back({"transformer_blocks.*.img_mlp.net.0.proj", TpStyle::kColwise, {}});
    rules.push_back({"transformer_blocks.*.img_mlp.net.2", TpStyle::kRowwise, {}});
    rules.push_back({"transformer_blocks.*.txt_mlp.net.0.proj", TpStyle::kColwise, {}});
    rules.push_back({"transformer_blocks.*.txt_mlp.net.2", TpStyle::kRowwise, {}});
    return plan;
  }
  if (IsTextEncoderClass(class_name)) {
    const std::vector<std::string> prefixes = TextModelPrefixes(class_name);
    if (std::find(prefixes.begin(), prefixes.end(), text_model_prefix) == prefixes.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text_model_prefix, "' is not where a ", class_name,
          " checkpoint keeps its text model (expected one of: ", absl::StrJoin(prefixes, ", "),
          ")"));
    }
    AddDecoderOnlyTextModel(std::string(text_model_prefix), &rules);
    return plan;
  }
  return absl::NotFoundError(absl::StrCat(
      "`_tp_plan` must be set on the model class to use tensor parallelism. '", class_name,
      "' does not define one (built-in plans: FluxTransformer2DModel, Flux2Transformer2DModel, "
      "QwenImageTransformer2DModel, Mistral3ForConditionalGeneration, "
      "Qwen2_5_VLForConditionalGeneration)."));
}

void AddModulationSharding(TpPlan* plan) {
  std::vector<const char*> paths;
  const std::string& cls = plan->model_class;
  if (cls == "FluxTransformer2DModel") {
    paths = {"transformer_blocks.*.norm1.linear", "transformer_blocks.*.norm1_context.linear",
             "single_transformer_blocks.*.norm.linear", "norm_out.linear"};
  } else if (cls == "Flux2Transformer2DModel" || cls == "Flux2TransformerModel") {
    paths = {"double_stream_modulation_img.linear", "double_stream_modulation_txt.linear",
             "single_stream_modulation.linear", "norm_out.linear"};
  } else if (cls == "QwenImageTransformer2DModel") {
    paths = {"transformer_blocks.*.img_mod.1", "transformer_blocks.*.txt_mod.1", "norm_out.linear"};
  }
  for (const char* p : paths) {
    if (plan->Find(p) == nullptr) plan->rules.push_back({p, TpStyle::kRowwiseSplitInput, {}});
  }
}

absl::StatusOr<TpPlan> BuiltinTpPlanForCheckpoint(const ComponentCheckpoint& ckpt) {
  const std::string cls = ConfigClassName(ckpt.config());
  auto with_dir = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(ckpt.dir(), ": ", s.message()));
  };
  if (!IsTextEncoderClass(cls)) {
    auto plan = BuiltinTpPlan(cls, ckpt.config());
    if (!plan.ok()) return with_dir(plan.status());
    return plan;
  }
  auto prefix = DetectTextModelPrefix(
      cls, [&](const std::string& name) { return ckpt.tensors().count(name) != 0; });
  if (!prefix.ok()) return with_dir(prefix.status());
  return BuiltinTpPlan(cls, ckpt.config(), *prefix);
}

absl::StatusOr<TpPlan> ParseTpPlanJson(const nlohmann::json& json, absl::string_view class_name,
                                       const nlohmann::json& config) {
  if (!json.is_object()) return absl::InvalidArgumentError("tp plan: must be a JSON object");
  TpPlan builtin;
  if (auto b = BuiltinTpPlan(class_name, config); b.ok()) builtin = std::move(*b);
  TpPlan plan;
  for (auto it = json.begin(); it != json.end(); ++it) {
    TpRule rule;
    rule.key = it.key();
    const auto& v = it.value();
    auto where = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("tp plan key '", rule.key, "': ", what));
    };
    if (v.is_string()) {
      auto style = ParseTpStyle(v.get<std::string>());
      if (!style.ok()) return where(style.status().message());
      rule.style = *style;
    } else if (v.is_object() && v.contains("style") && v["style"].is_string()) {
      auto style = ParseTpStyle(v["style"].get<std::string>());
      if (!style.ok()) return where(style.status().message());
      rule.style = *style;
      if (v.contains("blocks") && !v["blocks"].is_null()) {
        if (!v["blocks"].is_array()) {
          return where(absl::StrCat("'blocks' must be an array, got ", JsonTypePhrase(v["blocks"])));
        }
        for (const auto& b : v["blocks"]) {
          if (!b.is_number_integer() || b.get<int64_t>() <= 0) {
            return where("'blocks' must be positive integers");
          }
          rule.blocks.push_back(b.get<int64_t>());
        }
      }
    } else {
      const bool has_style = v.is_object() && v.contains("style");
      return where(absl::StrCat(
          has_style ? "'style' must be a style name"
                    : "value must be a style name or {\"style\": ..., \"blocks\": [...]}",
          ", got ", JsonTypePhrase(has_style ? v["style"] : v)));
    }
    const bool packed =
        rule.style == TpStyle::kPackedColwise || rule.style == TpStyle::kPackedRowwise;
    if (!packed && !rule.blocks.empty()) return where("'blocks' is only valid for packed styles");
    if (packed && rule.blocks.empty()) {
      if (const TpRule* b = builtin.Find(rule.key); b != nullptr && b->style == rule.style) {
        rule.blocks = b->blocks;
      }
    }
    plan.rules.push_back(std::move(rule));
  }
  plan.model_class = std::string(class_name);
  return plan;
}

nlohmann::json TpPlanToJson(const TpPlan& plan) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& r : plan.rules) {
    if (r.blocks.empty()) {
      out[r.key] = std::string(TpStyleName(r.style));
    } else {
      out[r.key] = {{"style", std::string(TpStyleName(r.style))}, {"blocks", r.blocks}};
    }
  }
  return out;
}

}  // namespace ditserve::sharding
