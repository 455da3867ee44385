#include "sharding/plan_resolver.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "common/status_macros.h"

namespace ditserve::sharding {
namespace {

std::string ShapeStr(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The module paths a key stands for, in block-index order.
absl::StatusOr<std::vector<std::string>> ExpandKey(const std::string& key,
                                                   const std::map<std::string, size_t>& by_name) {
  const size_t star = key.find('*');
  if (star == std::string::npos) return std::vector<std::string>{key};
  if (key.find('*', star + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Wildcard '*' can only be used once in a `_tp_plan` key, got '", key, "'."));
  }
  const std::string prefix = key.substr(0, star);
  const std::string suffix = key.substr(star + 1);
  if (prefix.empty() || prefix.back() != '.' || (!suffix.empty() && suffix.front() != '.')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`_tp_plan` key '", key,
        "': '*' must stand for a whole path component after a block list, as in "
        "'transformer_blocks.*.attn.to_q'."));
  }
  // Block indices present in the checkpoint: "<prefix><digits>.<anything>".
  std::map<int64_t, std::string> indices;
  for (auto it = by_name.lower_bound(prefix); it != by_name.end(); ++it) {
    const std::string& name = it->first;
    if (!absl::StartsWith(name, prefix)) break;
    const size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos) continue;
    const std::string idx = name.substr(prefix.size(), dot - prefix.size());
    if (!AllDigits(idx) || idx.size() > 9) continue;
    indices.emplace(std::stoll(idx), idx);
  }
  if (indices.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`_tp_plan` wildcard '", key, "' must expand over a block list, but the checkpoint has "
        "no tensors named '", prefix, "<index>.*'."));
  }
  std::vector<std::string> out;
  for (const auto& [i, idx] : indices) out.push_back(absl::StrCat(prefix, idx, suffix));
  return out;
}

// Absolute block sizes of a dimension split into `proportions`.
absl::StatusOr<std::vector<int64_t>> BlockSizes(const std::string& module, int64_t dim,
                                                const std::vector<int64_t>& proportions) {
  const int64_t sum = std::accumulate(proportions.begin(), proportions.end(), int64_t{0});
  if (sum <= 0 || dim % sum != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", module, "': Cannot split ", dim, " into proportional blocks ",
        ShapeStr(proportions), ": sum(", ShapeStr(proportions), ")=", sum,
        " does not divide ", dim, "."));
  }
  std::vector<int64_t> sizes;
  for (int64_t b : proportions) sizes.push_back(b * (dim / sum));
  return sizes;
}

// A head count of config.json: the text model's ("text_config" of a transformers vision-language
// config) when it has the field, else the top level's; null when neither is an integer.
const nlohmann::json* HeadCount(const nlohmann::json& config, const char* key) {
  if (!config.is_object()) return nullptr;
  auto text = config.find("text_config");
  if (text != config.end() && text->is_object()) {
    auto f = text->find(key);
    if (f != text->end() && f->is_number_integer()) return &*f;
  }
  auto f = config.find(key);
  if (f != config.end() && f->is_number_integer()) return &*f;
  return nullptr;
}

// tp_degree divides config.json's head counts (both, when it has the key/value head count).
absl::Status CheckHeadCounts(const nlohmann::json& config, int n) {
  const nlohmann::json* h = HeadCount(config, "num_attention_heads");
  const nlohmann::json* kv = HeadCount(config, "num_key_value_heads");
  if (h != nullptr && kv != nullptr) {
    if (h->get<int64_t>() % n != 0 || kv->get<int64_t>() % n != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("`tp_degree` (", n, ") must divide both the number of attention heads (",
                       h->get<int64_t>(), ") and the number of key/value heads (",
                       kv->get<int64_t>(), "): every rank keeps whole key/value groups."));
    }
  } else if (h != nullptr && h->get<int64_t>() % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat("`tp_degree` (", n,
                                                   ") must divide the number of attention heads (",
                                                   h->get<int64_t>(), ")."));
  }
  return absl::OkStatus();
}

// A planned module's Linear tensors in the checkpoint.
struct LinearTensors {
  std::string wname;
  const TensorMeta* weight = nullptr;
  const TensorMeta* bias = nullptr;  // null when the module has none
};

// Finds "<module>.weight" (rank 2) and "<module>.bias" (rank 1, one entry per weight row, if any).
absl::StatusOr<LinearTensors> FindLinearTensors(const TpRule& rule, const std::string& module,
                                                const std::vector<TensorMeta>& tensors,
                                                const std::map<std::string, size_t>& by_name) {
  LinearTensors lt;
  lt.wname = module + ".weight";
  auto w = by_name.find(lt.wname);
  if (w == by_name.end()) {
    return absl::InvalidArgumentError(absl::StrCat("`_tp_plan` key '", rule.key, "' names module '",
                                                   module, "', but the checkpoint has no tensor '",
                                                   lt.wname, "'."));
  }
  const TensorMeta& weight = tensors[w->second];
  lt.weight = &weight;
  if (weight.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("`_tp_plan` key '", rule.key, "': tensor '",
                                                   lt.wname, "' has shape ", ShapeStr(weight.shape),
                                                   "; a ", TpStyleName(rule.style),
                                                   " Linear weight must have rank 2 ([out, in])."));
  }
  const int64_t rows = weight.shape[0];
  if (auto b = by_name.find(module + ".bias"); b != by_name.end()) {
    lt.bias = &tensors[b->second];
    if (lt.bias->shape.size() != 1 || lt.bias->shape[0] != rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("`_tp_plan` key '", rule.key, "': tensor '", lt.bias->name, "' has shape ",
                       ShapeStr(lt.bias->shape), "; the bias of weight ", ShapeStr(weight.shape),
                       " must have shape [", rows, "]."));
    }
  }
  return lt;
}

// The absolute blocks of the weight's sliced dim `dim` (one block for plain styles), each of which
// divides by n.
absl::StatusOr<std::vector<int64_t>> SplitBlocks(const TpRule& rule, const std::string& module,
                                                 const LinearTensors& lt, int dim, bool packed,
                                                 int n) {
  const bool col = dim == 0;
  const std::vector<int64_t>& shape = lt.weight->shape;
  const int64_t size = shape[dim];
  std::vector<int64_t> blocks{size};
  if (packed) {
    ASSIGN_OR_RETURN(blocks, BlockSizes(module, size, rule.blocks));
    for (int64_t s : blocks) {
      if (s % n != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Cannot shard packed block of size ", s, " across ", n, " tensor-parallel ranks: ", s,
            " is not divisible by ", n, ". (module '", module, "', weight '", lt.wname,
            "' of shape ", ShapeStr(shape), ", blocks ", ShapeStr(blocks), ")"));
      }
    }
  } else if (size % n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cannot ", col ? "colwise" : "rowwise", "-shard '", module, "' weight ",
                     col ? "rows" : "columns", " (", size, ") across ", n,
                     " tensor-parallel ranks: not divisible by ", n, ". (weight '", lt.wname,
                     "' of shape ", ShapeStr(shape), ")"));
  }
  return blocks;
}

// Plans one module of `rule`: checks it, then records it in out->modules and its tensors in
// `planned` (tensor name -> layout).
absl::Status PlanModule(const TpRule& rule, const std::string& module, bool packed,
                        const std::vector<TensorMeta>& tensors,
                        const std::map<std::string, size_t>& by_name, ResolvedPlan* out,
                        std::map<std::string, PlannedTensor>* planned) {
  const int n = out->tp_degree;
  if (out->modules.count(module)) {
    return absl::InvalidArgumentError(absl::StrCat("`_tp_plan` plans module '", module,
                                                   "' twice (keys '", out->modules[module].rule_key,
                                                   "' and '", rule.key, "')."));
  }
  ASSIGN_OR_RETURN(LinearTensors lt, FindLinearTensors(rule, module, tensors, by_name));
  const bool col = IsColwise(rule.style);
  const int dim = col ? 0 : 1;
  ASSIGN_OR_RETURN(std::vector<int64_t> blocks, SplitBlocks(rule, module, lt, dim, packed, n));
  PlannedModule pm{module, rule.key, rule.style, {}};
  if (packed) pm.blocks = blocks;
  const TensorMeta& weight = *lt.weight;
  (*planned)[lt.wname] =
      PlannedTensor{lt.wname, weight.dtype, weight.shape, module, rule.style, dim, blocks};
  if (lt.bias != nullptr) {
    // Colwise biases follow the rows (per block); rowwise biases stay whole on every rank.
    const TensorMeta& bias = *lt.bias;
    (*planned)[bias.name] = PlannedTensor{bias.name,
                                          bias.dtype,
                                          bias.shape,
                                          module,
                                          rule.style,
                                          col ? 0 : -1,
                                          col ? blocks : std::vector<int64_t>{}};
  }
  out->modules[module] = std::move(pm);
  return absl::OkStatus();
}

// Plans every module `rule` names (none for a replicated rule).
absl::Status PlanRule(const TpRule& rule, const std::vector<TensorMeta>& tensors,
                      const std::map<std::string, size_t>& by_name, ResolvedPlan* out,
                      std::map<std::string, PlannedTensor>* planned) {
  ASSIGN_OR_RETURN(std::vector<std::string> modules, ExpandKey(rule.key, by_name));
  const bool packed =
      rule.style == TpStyle::kPackedColwise || rule.style == TpStyle::kPackedRowwise;
  if (rule.style == TpStyle::kReplicated) return absl::OkStatus();
  if (packed && rule.blocks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("`_tp_plan` key '", rule.key, "': ", TpStyleName(rule.style),
                     " needs blocks, and the model defines none for this module."));
  }
  for (const std::string& module : modules) {
    RETURN_IF_ERROR(PlanModule(rule, module, packed, tensors, by_name, out, planned));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedPlan> ResolveTpPlan(const TpPlan* plan,
                                           const std::vector<TensorMeta>& tensors, int tp_degree,
                                           const nlohmann::json* config) {
  const int n = tp_degree;
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("`tp_degree` must be >= 1 (got ", n, ")."));
  }
  if (config != nullptr) RETURN_IF_ERROR(CheckHeadCounts(*config, n));
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name[tensors[i].name] = i;

  ResolvedPlan out;
  out.tp_degree = n;
  // tensor name -> (module path, style, split dim, blocks)
  std::map<std::string, PlannedTensor> planned;
  if (plan != nullptr) {
    for (const TpRule& rule : plan->rules) {
      RETURN_IF_ERROR(PlanRule(rule, tensors, by_name, &out, &planned));
    }
  }
  out.tensors.reserve(tensors.size());
  for (const auto& [name, i] : by_name) {
    auto p = planned.find(name);
    if (p != planned.end()) {
      out.tensors.push_back(std::move(p->second));
    } else {
      const TensorMeta& t = tensors[i];
      out.tensors.push_back(
          PlannedTensor{t.name, t.dtype, t.shape, "", TpStyle::kReplicated, -1, {}});
    }
  }
  return out;
}

absl::StatusOr<ResolvedPlan> ResolveTpPlan(const TpPlan* plan, const ComponentCheckpoint& ckpt,
                                           int tp_degree) {
  std::vector<TensorMeta> metas;
  metas.reserve(ckpt.tensors().size());
  for (const auto& [name, loc] : ckpt.tensors()) {
    metas.push_back({name, loc.info->dtype, loc.info->shape});
  }
  auto resolved = ResolveTpPlan(plan, metas, tp_degree, &ckpt.config());
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(ckpt.dir(), ": ", resolved.status().message()));
  }
  return resolved;
}

}  // namespace ditserve::sharding
