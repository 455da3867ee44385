// Resolves a TpPlan against a checkpoint's tensor list and validates it before any tensor byte is
// read (diffusers modeling_utils.py's enable_parallelism and hooks/tensor_parallel.py). Torch-free.
//
// Checks, in order, each failing with INVALID_ARGUMENT and a message naming the key / module /
// tensor and the sizes involved (diffusers' wording where it has one):
//   * tp_degree >= 1, and it divides config.json's num_attention_heads (when present) and
//     num_key_value_heads (when present: every rank keeps whole key/value groups); for a
//     transformers vision-language config, those of its "text_config" first;
//   * every key has at most one "*", as a whole path component, expanding over a block list the
//     checkpoint has ("<prefix>.<index>." tensors, matched by index);
//   * every planned module has "<module>.weight" of rank 2, and "<module>.bias", if any, of rank 1
//     with as many entries as the weight has rows; no module is planned twice;
//   * colwise rows / rowwise columns divide by tp_degree; packed blocks: sum(blocks) divides the
//     sliced dim, and every block size individually divides by tp_degree.
// A rule covers "<module>.weight" and "<module>.bias"; other tensors are replicated.
//
// Thread-safety: pure function; ResolvedPlan is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "sharding/checkpoint.h"
#include "sharding/safetensors.h"
#include "sharding/tp_plan.h"

namespace ditserve::sharding {

struct TensorMeta {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// How one tensor is laid out across the ranks.
struct PlannedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;           // global
  std::string module;                   // its planned module, "" when unplanned
  TpStyle style = TpStyle::kReplicated; // the module's style (a rowwise bias is not sliced)
  int split_dim = -1;                   // -1: every rank holds it in full
  std::vector<int64_t> blocks;          // absolute sizes along split_dim (one for plain styles)
};

struct PlannedModule {
  std::string path;      // "transformer_blocks.0.attn.to_q"
  std::string rule_key;  // "transformer_blocks.*.attn.to_q"
  TpStyle style = TpStyle::kReplicated;
  std::vector<int64_t> blocks;  // absolute block sizes of the weight's sliced dim (packed styles)
};

struct ResolvedPlan {
  int tp_degree = 1;
  std::vector<PlannedTensor> tensors;             // sorted by name
  std::map<std::string, PlannedModule> modules;   // every planned module, by path
};

// `plan` may be null (everything replicated). `config` may be null (no head check).
absl::StatusOr<ResolvedPlan> ResolveTpPlan(const TpPlan* plan,
                                           const std::vector<TensorMeta>& tensors, int tp_degree,
                                           const nlohmann::json* config);

// The same for an opened checkpoint, with its config.json for the head check.
absl::StatusOr<ResolvedPlan> ResolveTpPlan(const TpPlan* plan, const ComponentCheckpoint& ckpt,
                                           int tp_degree);

}  // namespace ditserve::sharding
