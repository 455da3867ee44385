#include "models/vae/qwenimage_down_block.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::vae {

absl::StatusOr<QwenDownBlock> QwenDownBlock::Load(const sharding::ShardedStateDict& state,
                                                  const std::string& list_prefix,
                                                  int64_t first_index, int64_t in, int64_t out,
                                                  int64_t num_res_blocks, QwenDownsampleMode mode) {
  QwenDownBlock blk;
  int64_t index = first_index;
  int64_t current = in;
  for (int64_t j = 0; j < num_res_blocks; ++j, ++index) {
    ASSIGN_OR_RETURN(auto r, QwenResidualBlock::Load(state, absl::StrCat(list_prefix, ".", index),
                                                     current, out));
    blk.resnets_.push_back(std::move(r));
    current = out;
  }
  if (mode != QwenDownsampleMode::kNone) {
    ASSIGN_OR_RETURN(
        blk.downsample_conv_,
        Conv2d::Load(state, absl::StrCat(list_prefix, ".", index, ".resample.1"), out, out, 3));
  }
  return blk;
}

int64_t QwenDownBlock::num_layers() const {
  return static_cast<int64_t>(resnets_.size()) + (downsample_conv_ ? 1 : 0);
}

torch::Tensor QwenDownBlock::Forward(const torch::Tensor& x) const {
  torch::Tensor h = x;
  for (const auto& r : resnets_) h = r.Forward(h);
  if (!downsample_conv_) return h;
  return PadRightBottomStride2(h, *downsample_conv_);
}

}  // namespace ditserve::vae
