// The tensors of one diffusers joint-attention block's attention (FluxAttention /
// Flux2Attention / QwenDoubleStreamAttnProcessor's `attn` module), as the families' state-dict
// shape lists (`*_state_dict_shapes.h`) enumerate them: the image and text q/k/v projections, both
// output projections, each d x d, and the four per-head RMSNorm weights (head_dim). Pure.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ditserve::models {

// `linear(path, out, in)` records a Linear (the family decides on the bias); the norms go to
// `shapes` directly. `block` ends with "." ("transformer_blocks.3.").
inline void AddJointAttentionShapes(
    const std::string& block, int64_t dim, int64_t head_dim,
    const std::function<void(const std::string&, int64_t, int64_t)>& linear,
    std::map<std::string, std::vector<int64_t>>* shapes) {
  for (const char* m : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
                        "to_out.0", "to_add_out"}) {
    linear(block + "attn." + m, dim, dim);
  }
  for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"}) {
    (*shapes)[block + "attn." + n + ".weight"] = {head_dim};
  }
}

}  // namespace ditserve::models
