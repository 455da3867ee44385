#include "models/lora/lora_format.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config_json.h"
#include "common/status_macros.h"

namespace ditserve::lora {
namespace {

using sharding::TensorMeta;

bool EndsWith(const std::string& s, absl::string_view suffix) { return absl::EndsWith(s, suffix); }

std::string Shape(const std::vector<int64_t>& shape) { return absl::StrJoin(shape, "x"); }

absl::Status Refuse(const std::string& file, const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": LoRA key '", key, "': ", why));
}

// One adapted module as read from the file, before splitting fused layers.
struct Factors {
  const TensorMeta* a = nullptr;
  const TensorMeta* b = nullptr;
};

// The A / B pair of a module: both present, 2-D, ranks equal.
absl::Status CheckFactors(const std::string& file, const std::string& module, const Factors& f) {
  if (f.a == nullptr || f.b == nullptr) {
    const TensorMeta* have = f.a != nullptr ? f.a : f.b;
    return Refuse(file, have->name,
                  absl::StrCat("has no matching ", f.a == nullptr ? "down/A" : "up/B", " factor"));
  }
  if (f.a->shape.size() != 2 || f.b->shape.size() != 2) {
    return Refuse(file, f.a->shape.size() != 2 ? f.a->name : f.b->name,
                  absl::StrCat("a LoRA factor must be 2-D, got ",
                               Shape(f.a->shape.size() != 2 ? f.a->shape : f.b->shape)));
  }
  if (f.a->shape[0] != f.b->shape[1] || f.a->shape[0] <= 0) {
    return Refuse(file, f.b->name,
                  absl::StrCat("rank ", f.b->shape[1], " does not match ", f.a->name, "'s ",
                               f.a->shape[0], " (", module, ")"));
  }
  return absl::OkStatus();
}

// peft's pattern match of rank_pattern / alpha_pattern keys: the whole module path or a suffix of
// it on a "." boundary.
bool PatternMatches(const std::string& pattern, const std::string& module) {
  return module == pattern ||
         (module.size() > pattern.size() && EndsWith(module, pattern) &&
          module[module.size() - pattern.size() - 1] == '.');
}

// ------------------------------------------------------------------------------------------------
// kohya / sd-scripts FLUX.1.

struct KohyaRule {
  const char* name;                  // after "lora_unet_", with {i} for a block index
  std::vector<const char*> modules;  // our modules, with {i}
  enum Split { kWhole, kEqual, kLinear1 } split = kWhole;
  bool swap_halves = false;  // BFL (shift, scale) → diffusers (scale, shift)
  bool ignore_alpha = false;  // diffusers loads it with scale 1
};

const std::vector<KohyaRule>& KohyaRules() {
  static const auto* rules = new std::vector<KohyaRule>{
      {"double_blocks_{i}_img_attn_proj", {"transformer_blocks.{i}.attn.to_out.0"}},
      {"double_blocks_{i}_img_attn_qkv",
       {"transformer_blocks.{i}.attn.to_q", "transformer_blocks.{i}.attn.to_k",
        "transformer_blocks.{i}.attn.to_v"},
       KohyaRule::kEqual},
      {"double_blocks_{i}_img_mlp_0", {"transformer_blocks.{i}.ff.net.0.proj"}},
      {"double_blocks_{i}_img_mlp_2", {"transformer_blocks.{i}.ff.net.2"}},
      {"double_blocks_{i}_img_mod_lin", {"transformer_blocks.{i}.norm1.linear"}},
      {"double_blocks_{i}_txt_attn_proj", {"transformer_blocks.{i}.attn.to_add_out"}},
      {"double_blocks_{i}_txt_attn_qkv",
       {"transformer_blocks.{i}.attn.add_q_proj", "transformer_blocks.{i}.attn.add_k_proj",
        "transformer_blocks.{i}.attn.add_v_proj"},
       KohyaRule::kEqual},
      {"double_blocks_{i}_txt_mlp_0", {"transformer_blocks.{i}.ff_context.net.0.proj"}},
      {"double_blocks_{i}_txt_mlp_2", {"transformer_blocks.{i}.ff_context.net.2"}},
      {"double_blocks_{i}_txt_mod_lin", {"transformer_blocks.{i}.norm1_context.linear"}},
      {"single_blocks_{i}_linear1",
       {"single_transformer_blocks.{i}.attn.to_q", "single_transformer_blocks.{i}.attn.to_k",
        "single_transformer_blocks.{i}.attn.to_v", "single_transformer_blocks.{i}.proj_mlp"},
       KohyaRule::kLinear1},
      {"single_blocks_{i}_linear2", {"single_transformer_blocks.{i}.proj_out"}},
      {"single_blocks_{i}_modulation_lin", {"single_transformer_blocks.{i}.norm.linear"}},
      {"img_in", {"x_embedder"}},
      {"txt_in", {"context_embedder"}},
      {"time_in_in_layer", {"time_text_embed.timestep_embedder.linear_1"}},
      {"time_in_out_layer", {"time_text_embed.timestep_embedder.linear_2"}},
      {"vector_in_in_layer", {"time_text_embed.text_embedder.linear_1"}},
      {"vector_in_out_layer", {"time_text_embed.text_embedder.linear_2"}},
      {"guidance_in_in_layer", {"time_text_embed.guidance_embedder.linear_1"}},
      {"guidance_in_out_layer", {"time_text_embed.guidance_embedder.linear_2"}},
      {"final_layer_adaLN_modulation_1", {"norm_out.linear"}, KohyaRule::kWhole, true, true},
      {"final_layer_linear", {"proj_out"}, KohyaRule::kWhole, false, true},
  };
  return *rules;
}

// Matches `base` (a kohya module name without "lora_unet_") against a rule; fills the block index.
bool MatchRule(const KohyaRule& rule, const std::string& base, std::string* index) {
  const std::string pattern = rule.name;
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) return base == pattern;
  const std::string head = pattern.substr(0, at), tail = pattern.substr(at + 3);
  if (base.size() <= head.size() + tail.size() || !absl::StartsWith(base, head) ||
      !EndsWith(base, tail)) {
    return false;
  }
  const std::string digits = base.substr(head.size(), base.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *index = std::to_string(std::stoi(digits));  // "007" names block 7, as diffusers' int()
  return true;
}

std::string WithIndex(const char* module, const std::string& index) {
  std::string m = module;
  const size_t at = m.find("{i}");
  if (at != std::string::npos) m.replace(at, 3, index);
  return m;
}

// The kohya factors by module name (with "lora_unet_"); refuses text-encoder, unknown and
// non-kohya keys, and an .alpha whose module has no factors.
absl::Status GroupKohyaKeys(const std::vector<TensorMeta>& tensors, const std::string& file,
                            std::map<std::string, Factors>* by_module) {
  std::set<std::string> alpha_modules;
  for (const TensorMeta& t : tensors) {
    const std::string& k = t.name;
    if (absl::StartsWith(k, "lora_te") || absl::StartsWith(k, "text_encoder")) {
      return Refuse(file, k,
                    "text-encoder LoRA weights are not supported (the transformer's only)");
    }
    if (!absl::StartsWith(k, "lora_unet_")) {
      return Refuse(file, k, "not a kohya FLUX key (lora_unet_*) in a kohya-layout file");
    }
    if (EndsWith(k, ".lora_down.weight")) {
      (*by_module)[k.substr(0, k.size() - 17)].a = &t;
    } else if (EndsWith(k, ".lora_up.weight")) {
      (*by_module)[k.substr(0, k.size() - 15)].b = &t;
    } else if (EndsWith(k, ".alpha")) {
      alpha_modules.insert(k.substr(0, k.size() - 6));
    } else {
      return Refuse(file, k,
                    "unknown kohya key (expected .lora_down.weight, .lora_up.weight, .alpha)");
    }
  }
  for (const std::string& m : alpha_modules) {
    if (by_module->count(m) == 0) return Refuse(file, m + ".alpha", "an alpha without factors");
  }
  return absl::OkStatus();
}

// The first rule that `base` (a kohya module name without "lora_unet_") matches, its block index
// in `index`; nullptr when none does.
const KohyaRule* FindKohyaRule(const std::string& base, std::string* index) {
  for (const KohyaRule& r : KohyaRules()) {
    if (MatchRule(r, base, index)) return &r;
  }
  return nullptr;
}

// How many of B's rows (f.b's first dimension) each of the rule's modules takes, in order.
absl::StatusOr<std::vector<int64_t>> KohyaPartRows(const KohyaRule& rule, const Factors& f,
                                                   const std::string& file) {
  const int64_t in = f.a->shape[1], rows = f.b->shape[0];
  const size_t parts = rule.modules.size();
  if (rule.split == KohyaRule::kEqual) {
    if (rows % static_cast<int64_t>(parts) != 0) {
      return Refuse(file, f.b->name,
                    absl::StrCat(rows, " rows do not split into ", parts, " equal parts"));
    }
    return std::vector<int64_t>(parts, rows / static_cast<int64_t>(parts));
  }
  if (rule.split == KohyaRule::kLinear1) {
    if (rows <= 3 * in) {
      return Refuse(
          file, f.b->name,
          absl::StrCat(rows, " rows cannot hold q, k, v of width ", in, " and an MLP part"));
    }
    return std::vector<int64_t>{in, in, in, rows - 3 * in};
  }
  return std::vector<int64_t>{rows};
}

// One target per module of the rule (block `index`), each reading its rows of B.
absl::Status AddKohyaTargets(const KohyaRule& rule, const std::string& index, const Factors& f,
                             double scale, const std::string& file, LoraLayout* layout) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, KohyaPartRows(rule, f, file));
  const int64_t rank = f.a->shape[0], in = f.a->shape[1], rows = f.b->shape[0];
  int64_t row = 0;
  for (size_t p = 0; p < rule.modules.size(); ++p) {
    LoraTargetSource t;
    t.module = WithIndex(rule.modules[p], index);
    t.a_key = f.a->name;
    t.b_key = f.b->name;
    if (rule.swap_halves) {
      if (rows % 2 != 0) return Refuse(file, f.b->name, absl::StrCat(rows, " rows do not halve"));
      t.b_rows = {{rows / 2, rows}, {0, rows / 2}};
    } else {
      t.b_rows = {{row, row + sizes[p]}};
    }
    row += sizes[p];
    t.rank = rank;
    t.in_features = in;
    t.out_features = sizes[p];
    t.scale = scale;
    layout->targets.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoraLayout> MapKohya(const std::vector<TensorMeta>& tensors,
                                    const std::map<std::string, double>& alphas,
                                    const std::string& file) {
  std::map<std::string, Factors> by_module;  // kohya module name (with lora_unet_)
  RETURN_IF_ERROR(GroupKohyaKeys(tensors, file, &by_module));
  LoraLayout layout;
  layout.format = LoraFormat::kKohyaFlux;
  for (const auto& [kmodule, f] : by_module) {
    RETURN_IF_ERROR(CheckFactors(file, kmodule, f));
    std::string index;
    const KohyaRule* rule = FindKohyaRule(kmodule.substr(10), &index);  // after "lora_unet_"
    if (rule == nullptr) {
      return Refuse(file, f.a->name, "no FLUX.1 transformer module for this kohya name");
    }
    double scale = 1.0;
    if (!rule->ignore_alpha) {
      auto it = alphas.find(kmodule + ".alpha");
      if (it != alphas.end()) scale = it->second / static_cast<double>(f.a->shape[0]);
    }
    RETURN_IF_ERROR(AddKohyaTargets(*rule, index, f, scale, file, &layout));
  }
  return layout;
}

// ------------------------------------------------------------------------------------------------
// diffusers / PEFT.

// The adapter config's view of one module: rank and alpha (peft LoraConfig + patterns).
struct ConfigView {
  bool present = false;
  int64_t r = 0;
  double alpha = 0;
  std::map<std::string, int64_t> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  bool rslora = false;
};

absl::StatusOr<ConfigView> ReadConfig(const nlohmann::json* config, const std::string& file) {
  ConfigView v;
  if (config == nullptr || config->is_null()) return v;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": LoRA adapter config: ", why));
  };
  if (!config->is_object()) return bad("not a JSON object");
  // A pipeline-level save prefixes the transformer's fields ("transformer.r").
  nlohmann::json c = nlohmann::json::object();
  bool prefixed = false;
  for (auto it = config->begin(); it != config->end(); ++it) {
    if (absl::StartsWith(it.key(), "transformer.")) prefixed = true;
  }
  for (auto it = config->begin(); it != config->end(); ++it) {
    if (!prefixed) {
      c[it.key()] = it.value();
    } else if (absl::StartsWith(it.key(), "transformer.")) {
      c[it.key().substr(12)] = it.value();
    }
  }
  auto number = [&](const char* key, double* out) -> absl::Status {
    if (!c.contains(key)) return absl::OkStatus();
    if (!c[key].is_number()) {
      return bad(absl::StrCat("'", key, "' must be a number, got ", JsonTypePhrase(c[key])));
    }
    *out = c[key].get<double>();
    return absl::OkStatus();
  };
  double r = 0, alpha = 0;
  RETURN_IF_ERROR(number("r", &r));
  RETURN_IF_ERROR(number("lora_alpha", &alpha));
  if (!c.contains("r") && !c.contains("lora_alpha")) return v;  // not an adapter config
  if (r < 1 || r > (1 << 20) || r != std::floor(r)) return bad(absl::StrCat("'r' must be a positive integer, got ", r));
  if (!c.contains("lora_alpha")) alpha = 8;  // peft's LoraConfig default
  if (!std::isfinite(alpha)) return bad("'lora_alpha' must be finite");
  v.present = true;
  v.r = static_cast<int64_t>(r);
  v.alpha = alpha;
  // Booleans (null: peft's default, false); another type is refused naming the field.
  auto flag = [&](const char* key, bool* out) -> absl::Status {
    if (!c.contains(key) || c[key].is_null()) return absl::OkStatus();
    if (!c[key].is_boolean()) {
      return bad(absl::StrCat("'", key, "' must be a boolean, got ", JsonTypePhrase(c[key])));
    }
    *out = c[key].get<bool>();
    return absl::OkStatus();
  };
  for (const char* key : {"use_dora", "lora_bias"}) {
    bool set = false;
    RETURN_IF_ERROR(flag(key, &set));
    if (set) return bad(absl::StrCat("'", key, "' adapters are not supported"));
  }
  RETURN_IF_ERROR(flag("use_rslora", &v.rslora));
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    if (!c[key].is_object()) {
      return bad(absl::StrCat("'", key, "' must be an object, got ", JsonTypePhrase(c[key])));
    }
    for (auto it = c[key].begin(); it != c[key].end(); ++it) {
      if (!it.value().is_number()) {
        return bad(absl::StrCat("'", key, ".", it.key(), "' must be a number, got ",
                                JsonTypePhrase(it.value())));
      }
      const double x = it.value().get<double>();
      if (key[0] == 'r') {
        // Bounded as 'r' is (a larger value would not even convert to int64_t).
        if (!(x >= 1 && x <= (1 << 20)) || x != std::floor(x)) {
          return bad(absl::StrCat("rank_pattern '", it.key(), "' must be a positive integer"));
        }
        v.rank_pattern[it.key()] = static_cast<int64_t>(x);
      } else {
        if (!std::isfinite(x)) return bad(absl::StrCat("alpha_pattern '", it.key(), "' must be finite"));
        v.alpha_pattern[it.key()] = x;
      }
    }
  }
  return v;
}

// diffusers' get_peft_kwargs for network alphas: the most common value (ties: the first seen in
// key order, as collections.Counter.most_common keeps insertion order).
double MostCommon(const std::vector<double>& values) {
  double best = values.front();
  size_t best_count = 0;
  for (double v : values) {
    const size_t n = static_cast<size_t>(std::count(values.begin(), values.end(), v));
    if (n > best_count) {
      best = v;
      best_count = n;
    }
  }
  return best;
}

// The prefix of a diffusers file's keys: "transformer." when any key has it, else
// "base_model.model." when any key has that, else none.
std::string DiffusersPrefix(const std::vector<TensorMeta>& tensors) {
  std::string prefix;
  for (const TensorMeta& t : tensors) {
    if (absl::StartsWith(t.name, "transformer.")) prefix = "transformer.";
  }
  if (prefix.empty()) {
    for (const TensorMeta& t : tensors) {
      if (absl::StartsWith(t.name, "base_model.model.")) prefix = "base_model.model.";
    }
  }
  return prefix;
}

// The factors and .alpha values by module path (after `prefix`); refuses text-encoder, DoRA, bias,
// unknown and unprefixed keys, and an .alpha whose module has no factors.
absl::Status GroupDiffusersKeys(const std::vector<TensorMeta>& tensors,
                                const std::map<std::string, double>& alphas,
                                const std::string& prefix, const std::string& file,
                                std::map<std::string, Factors>* by_module,
                                std::map<std::string, double>* module_alpha) {
  for (const TensorMeta& t : tensors) {
    const std::string& k = t.name;
    if (absl::StartsWith(k, "text_encoder") || absl::StartsWith(k, "lora_te")) {
      return Refuse(file, k,
                    "text-encoder LoRA weights are not supported (the transformer's only)");
    }
    if (!absl::StartsWith(k, prefix)) {
      return Refuse(file, k,
                    absl::StrCat("outside the '", prefix, "' keys of the rest of the file"));
    }
    const std::string rest = k.substr(prefix.size());
    if (absl::StrContains(rest, "lora_magnitude_vector")) {
      return Refuse(file, k, "DoRA adapters are not supported");
    }
    if (EndsWith(rest, ".lora_A.weight")) {
      (*by_module)[rest.substr(0, rest.size() - 14)].a = &t;
    } else if (EndsWith(rest, ".lora_B.weight")) {
      (*by_module)[rest.substr(0, rest.size() - 14)].b = &t;
    } else if (prefix == "transformer." && EndsWith(rest, ".lora_down.weight")) {
      (*by_module)[rest.substr(0, rest.size() - 17)].a = &t;
    } else if (prefix == "transformer." && EndsWith(rest, ".lora_up.weight")) {
      (*by_module)[rest.substr(0, rest.size() - 15)].b = &t;
    } else if (EndsWith(rest, ".alpha") && alphas.count(k) != 0) {
      (*module_alpha)[rest.substr(0, rest.size() - 6)] = alphas.at(k);
    } else if (EndsWith(rest, ".bias") && absl::StrContains(rest, ".lora_B")) {
      return Refuse(file, k, "LoRA biases (lora_bias) are not supported");
    } else {
      return Refuse(file, k,
                    "unknown key (expected <module>.lora_A.weight, .lora_B.weight or .alpha)");
    }
  }
  for (const auto& [m, a] : *module_alpha) {
    if (by_module->count(m) == 0) {
      return Refuse(file, prefix + m + ".alpha", "an alpha without factors");
    }
  }
  return absl::OkStatus();
}

// The scale the adapter config gives `module` (peft: alpha / r, alpha / sqrt(r) with rsLoRA; the
// last matching rank_pattern / alpha_pattern entry overrides r / alpha); r must be the tensors'
// `rank` (`a_key` names the A factor in the error).
absl::StatusOr<double> ConfigScale(const ConfigView& cfg, const std::string& module, int64_t rank,
                                   const std::string& a_key, const std::string& file) {
  int64_t r = cfg.r;
  double alpha = cfg.alpha;
  for (const auto& [p, pr] : cfg.rank_pattern) {
    if (PatternMatches(p, module)) r = pr;
  }
  for (const auto& [p, pa] : cfg.alpha_pattern) {
    if (PatternMatches(p, module)) alpha = pa;
  }
  if (r != rank) {
    return Refuse(file, a_key,
                  absl::StrCat("the adapter config gives ", module, " rank ", r,
                               " but the tensor has rank ", rank));
  }
  return cfg.rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

absl::StatusOr<LoraLayout> MapDiffusers(const std::vector<TensorMeta>& tensors,
                                        const std::map<std::string, double>& alphas,
                                        const nlohmann::json* config, const std::string& file) {
  const std::string prefix = DiffusersPrefix(tensors);
  std::map<std::string, Factors> by_module;
  std::map<std::string, double> module_alpha;
  RETURN_IF_ERROR(GroupDiffusersKeys(tensors, alphas, prefix, file, &by_module, &module_alpha));
  ASSIGN_OR_RETURN(ConfigView cfg, ReadConfig(config, file));
  if (cfg.present && !module_alpha.empty()) {
    // diffusers: "Both `network_alphas` and `metadata` cannot be specified."
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": LoRA file has both an adapter config and .alpha tensors; diffusers refuses that"));
  }
  double common_alpha = 0;
  if (!module_alpha.empty()) {
    std::vector<double> values;
    for (const auto& [m, a] : module_alpha) values.push_back(a);
    common_alpha = MostCommon(values);
  }
  LoraLayout layout;
  layout.format = LoraFormat::kDiffusers;
  for (const auto& [module, f] : by_module) {
    RETURN_IF_ERROR(CheckFactors(file, module, f));
    LoraTargetSource t;
    t.module = module;
    t.a_key = f.a->name;
    t.b_key = f.b->name;
    t.rank = f.a->shape[0];
    t.in_features = f.a->shape[1];
    t.out_features = f.b->shape[0];
    t.b_rows = {{0, t.out_features}};
    if (cfg.present) {
      ASSIGN_OR_RETURN(t.scale, ConfigScale(cfg, module, t.rank, f.a->name, file));
    } else if (!module_alpha.empty()) {
      auto it = module_alpha.find(module);
      const double alpha = it != module_alpha.end() ? it->second : common_alpha;
      t.scale = alpha / static_cast<double>(t.rank);
    }
    layout.targets.push_back(std::move(t));
  }
  return layout;
}

}  // namespace

const char* LoraFormatName(LoraFormat format) {
  return format == LoraFormat::kKohyaFlux ? "kohya" : "diffusers";
}

bool IsAlphaKey(const std::string& name) { return EndsWith(name, ".alpha"); }

absl::StatusOr<LoraLayout> MapLoraLayout(const std::vector<TensorMeta>& tensors,
                                         const std::map<std::string, double>& alphas,
                                         const nlohmann::json* config, const std::string& file) {
  if (tensors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": the LoRA file holds no tensors"));
  }
  bool kohya = false, other = false;
  const TensorMeta* first_other = nullptr;
  for (const TensorMeta& t : tensors) {
    if (absl::StartsWith(t.name, "lora_unet_")) {
      kohya = true;
    } else if (!absl::StartsWith(t.name, "lora_te")) {
      other = true;
      if (first_other == nullptr) first_other = &t;
    }
  }
  if (kohya && other) {
    return Refuse(file, first_other->name, "a diffusers-style key in a kohya (lora_unet_*) file");
  }
  ASSIGN_OR_RETURN(LoraLayout layout, kohya ? MapKohya(tensors, alphas, file)
                                            : MapDiffusers(tensors, alphas, config, file));
  if (layout.targets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no LoRA factors in the file"));
  }
  std::set<std::string> seen;
  for (const LoraTargetSource& t : layout.targets) {
    if (!seen.insert(t.module).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": two LoRA entries adapt module '", t.module, "'"));
    }
    layout.max_rank = std::max(layout.max_rank, t.rank);
  }
  std::sort(layout.targets.begin(), layout.targets.end(),
            [](const LoraTargetSource& a, const LoraTargetSource& b) { return a.module < b.module; });
  return layout;
}

}  // namespace ditserve::lora
