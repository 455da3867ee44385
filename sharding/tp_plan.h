// A tensor-parallel plan (diffusers hooks/tensor_parallel.py and the models' _tp_plan): module-path glob -> style, as diffusers' `_tp_plan`.
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
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharding/checkpoint.h"
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
//
// Text encoders (transformers vision-language classes, text model only): for
// Mistral3ForConditionalGeneration (FLUX.2) and Qwen2_5_VLForConditionalGeneration (Qwen-Image),
// transformers' `base_model_tp_plan` of the text model (MistralConfig / Qwen2_5_VLTextConfig):
// layers.*.self_attn.{q,k,v}_proj and layers.*.mlp.{gate,up}_proj colwise, layers.*.self_attn.o_proj
// and layers.*.mlp.down_proj rowwise, keyed under the text model's tensor-name prefix (see
// TextModelPrefixes; this overload uses the transformers 5 one, "model.language_model.").
// Everything else (embeddings, norms; the vision tower, projector and lm_head, which the text
// encoder never loads) stays replicated.
absl::StatusOr<TpPlan> BuiltinTpPlan(absl::string_view class_name, const nlohmann::json& config);
// The same with the text-encoder keys under `text_model_prefix` (one of TextModelPrefixes);
// INVALID_ARGUMENT for another prefix. Other classes ignore the prefix.
absl::StatusOr<TpPlan> BuiltinTpPlan(absl::string_view class_name, const nlohmann::json& config,
                                     absl::string_view text_model_prefix);

// Where the text model of a vision-language checkpoint keeps its tensors, which depends on the
// transformers version that saved it; newest first: "model.language_model." (transformers >= 4.52
// and 5), then "language_model.model." (older Mistral3ForConditionalGeneration) or "model." (older
// Qwen2_5_VLForConditionalGeneration, e.g. Qwen-Image's text_encoder). Empty for other classes.
std::vector<std::string> TextModelPrefixes(absl::string_view class_name);
// The first of TextModelPrefixes(class_name) whose "<prefix>embed_tokens.weight" `has_tensor`
// reports. NOT_FOUND naming the class and the tensors looked for when none matches (or the class
// has no text model).
absl::StatusOr<std::string> DetectTextModelPrefix(
    absl::string_view class_name, const std::function<bool(const std::string&)>& has_tensor);

// The class a config.json describes: "_class_name" (diffusers), else "architectures"[0]
// (transformers), else "".
std::string ConfigClassName(const nlohmann::json& config);

// Our extension of the diffusion transformers' plans: the AdaLN modulation projections, which the
// reference replicates on every rank (about 3.3 B of FLUX.1-dev's 11.9 B parameters, 6.8 B of
// Qwen-Image's 20.4 B), become rowwise_split_input: each rank holds 1/N of their input columns,
// takes its slice of the replicated conditioning vector, and one all-reduce of the (B, k·D) output
// gives every rank the full modulation. FluxTransformer2DModel: transformer_blocks.*.norm1(_context)
// .linear, single_transformer_blocks.*.norm.linear, norm_out.linear; Flux2Transformer2DModel: the
// three shared *_modulation*.linear and norm_out.linear; QwenImageTransformer2DModel:
// transformer_blocks.*.{img,txt}_mod.1, norm_out.linear. Other plans are left as they are.
void AddModulationSharding(TpPlan* plan);

// The built-in plan of an opened component: ConfigClassName(ckpt.config()), and for the text
// encoders the prefix DetectTextModelPrefix finds among the checkpoint's tensors (errors name
// ckpt.dir()). What `ditserve-tool plan` and the text-encoder loader use.
absl::StatusOr<TpPlan> BuiltinTpPlanForCheckpoint(const ComponentCheckpoint& ckpt);

// A plan from JSON: {"<key>": "<style>" | {"style": "<style>", "blocks": [..]}, ...}. Packed rules
// without "blocks" take them from the built-in plan of `class_name` for the same key, if any.
absl::StatusOr<TpPlan> ParseTpPlanJson(const nlohmann::json& json, absl::string_view class_name,
                                       const nlohmann::json& config);
nlohmann::json TpPlanToJson(const TpPlan& plan);

}  // namespace ditserve::sharding
