// A tensor-parallel plan (SPEC §1.3, §1.9): module-path glob -> style, as diffusers' `_tp_plan`.
// Torch-free.
//
// Keys are module paths relative to the model root with at most one "*" standing for the index in
// a block list ("transformer_blocks.*.attn.to_q"). A rule applies to "<module>.weight" and
// "<module>.bias". Modules no rule names stay replicated. Packed styles carry `blocks`, positive
// integers used as proportions of the sliced dimension; the built-in plans fill them with the
// absolute sizes the model classes set in their __init__ (from config.json), which also work as
// proportions. Validation against a checkpoint happens in plan_resolver.h.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharding/tp_style.h"

namespace ditserve::sharding {

struct TpRule {
  std::string key;              // "transformer_blocks.*.attn.to_q"
  TpStyle style = TpStyle::kColwise;
  std::vector<int64_t> blocks;  // packed styles only: proportions; empty = not given
};

struct TpPlan {
  std::string model_class;  // the class the plan was made for ("" for a user plan)
  std::vector<TpRule> rules;
  const TpRule* Find(absl::string_view key) const;
};

// "colwise", "rowwise", "rowwise_split_input", "packed_colwise", "packed_rowwise".
absl::StatusOr<TpStyle> ParseTpStyle(absl::string_view name);

// The `_tp_plan` of FluxTransformer2DModel, Flux2Transformer2DModel (also accepted as
// Flux2TransformerModel) or QwenImageTransformer2DModel, with packed block sizes from `config`
// (the model's config.json: num_attention_heads, attention_head_dim, mlp_ratio). NOT_FOUND for a
// class without a plan (as diffusers: "`_tp_plan` must be set on the model class ...").
absl::StatusOr<TpPlan> BuiltinTpPlan(absl::string_view class_name, const nlohmann::json& config);

// A plan from JSON: {"<key>": "<style>" | {"style": "<style>", "blocks": [..]}, ...}. Packed rules
// without "blocks" take them from the built-in plan of `class_name` for the same key, if any.
absl::StatusOr<TpPlan> ParseTpPlanJson(const nlohmann::json& json, absl::string_view class_name,
                                       const nlohmann::json& config);
nlohmann::json TpPlanToJson(const TpPlan& plan);

}  // namespace ditserve::sharding
