// The LoRA file layouts FLUX users have, mapped to the base model's module paths. Torch-free: works
// on tensor names, shapes and the safetensors metadata only, before any tensor byte is read.
//
// Layouts (diffusers loaders/lora_pipeline.py and lora_conversion_utils.py):
//   * diffusers / PEFT: "<prefix><module>.lora_A.weight" (r, in) and ".lora_B.weight" (out, r),
//     prefix "transformer.", "base_model.model." or none; lora_down / lora_up are accepted for
//     A / B under "transformer.". The scale of each module is alpha / r:
//       - from the adapter config (safetensors metadata "lora_adapter_metadata", written by
//         diffusers' save_lora_weights, or a PEFT adapter_config.json beside the file): r,
//         lora_alpha, rank_pattern, alpha_pattern, use_rslora (alpha / sqrt(r));
//       - else from "<module>.alpha" scalars (diffusers' network alphas: modules without one take
//         the most common alpha);
//       - else 1 (alpha = r, the diffusers/PEFT convention).
//   * kohya / sd-scripts FLUX.1 ("lora_unet_<block>_<layer>.lora_down.weight", ".lora_up.weight",
//     ".alpha"; "diffusion_model." is read as "lora_unet_"): double_blocks_i_{img,txt}_{attn_qkv,
//     attn_proj, mlp_0, mlp_2, mod_lin}, single_blocks_i_{linear1, linear2, modulation_lin},
//     {img,txt}_in, {time,vector,guidance}_in_{in,out}_layer, final_layer_{linear,
//     adaLN_modulation_1}. Fused layers split into our modules as diffusers does: attn_qkv into
//     q/k/v (equal thirds of lora_up's rows, lora_down shared), linear1 into q/k/v/proj_mlp (rows
//     d, d, d, rest, with d = lora_down's input width); final_layer_adaLN_modulation_1's lora_up
//     halves are swapped (BFL shift, scale → diffusers scale, shift). Scale alpha / rank, except
//     final_layer_* which diffusers loads with scale 1 (its converter ignores their alphas).
// Refused with INVALID_ARGUMENT naming the file and the first key that cannot be mapped: text
// encoder weights (lora_te*, text_encoder.), DoRA magnitudes, LoRA biases, mixed layouts, and any
// other key; also a lora_A without its lora_B (and the reverse), factor shapes that disagree, and
// adapter-config ranks that disagree with the tensors.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "sharding/plan_resolver.h"

namespace ditserve::lora {

enum class LoraFormat { kDiffusers, kKohyaFlux };
const char* LoraFormatName(LoraFormat format);  // "diffusers", "kohya"

// A contiguous run of rows of a stored tensor.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// One adapted module: where its A and B are stored, and its scale.
struct LoraTargetSource {
  std::string module;     // the base model's module path, "transformer_blocks.0.attn.to_q"
  std::string a_key;      // stored (r, in)
  std::string b_key;      // stored (rows, r): the module's B is `b_rows` of it, concatenated
  std::vector<RowRange> b_rows;
  int64_t rank = 0;       // r
  int64_t in_features = 0;
  int64_t out_features = 0;  // sum of b_rows
  double scale = 1.0;        // alpha / r (before the request's weight)
};

struct LoraLayout {
  LoraFormat format = LoraFormat::kDiffusers;
  std::vector<LoraTargetSource> targets;  // sorted by module
  int64_t max_rank = 0;
};

// `tensors`: every tensor of the file (names, shapes, dtypes); `alphas`: the values of the scalar
// ".alpha" tensors among them (read by the caller); `config`: the adapter config (metadata or
// adapter_config.json), or null. `file` names the file in errors.
absl::StatusOr<LoraLayout> MapLoraLayout(const std::vector<sharding::TensorMeta>& tensors,
                                         const std::map<std::string, double>& alphas,
                                         const nlohmann::json* config, const std::string& file);

// True for the tensor names MapLoraLayout reads a scalar from (kohya and network alphas).
bool IsAlphaKey(const std::string& name);

}  // namespace ditserve::lora
