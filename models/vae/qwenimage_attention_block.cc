#include "models/vae/qwenimage_attention_block.h"

#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::vae {

absl::StatusOr<QwenAttentionBlock> QwenAttentionBlock::Load(
    const sharding::ShardedStateDict& state, const std::string& prefix, int64_t channels) {
  QwenAttentionBlock a;
  ASSIGN_OR_RETURN(a.norm_, ChannelRmsNorm::Load(state, prefix + ".norm", channels, /*images=*/true));
  ASSIGN_OR_RETURN(a.to_qkv_, Conv2d::Load(state, prefix + ".to_qkv", channels, 3 * channels, 1));
  ASSIGN_OR_RETURN(a.proj_, Conv2d::Load(state, prefix + ".proj", channels, channels, 1));
  return a;
}

torch::Tensor QwenAttentionBlock::Forward(const torch::Tensor& x) const {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  auto qkv = to_qkv_(norm_(x));                                              // (N, 3C, H, W)
  qkv = qkv.reshape({n, 1, 3 * c, h * w}).permute({0, 1, 3, 2}).contiguous();  // (N, 1, HW, 3C)
  auto parts = qkv.chunk(3, /*dim=*/-1);
  auto o = compat::ScaledDotProductAttention(parts[0], parts[1], parts[2]);  // (N, 1, HW, C)
  o = o.squeeze(1).permute({0, 2, 1}).reshape({n, c, h, w});
  return proj_(o) + x;
}

}  // namespace ditserve::vae
