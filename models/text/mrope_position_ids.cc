#include "models/text/mrope_position_ids.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/model_checks.h"

namespace ditserve::text {
namespace {

absl::Status CheckArguments(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                            const std::vector<ImageGridThw>& grids, int64_t merge) {
  if (!input_ids.defined() || input_ids.dim() != 2 ||
      !c10::isIntegralType(input_ids.scalar_type(), /*includeBool=*/false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("M-RoPE positions: input_ids must be an integer (B, T) tensor, got ",
                     input_ids.defined() ? models::ShapeString(input_ids) : "none"));
  }
  if (attention_mask.defined() &&
      (attention_mask.sizes() != input_ids.sizes() ||
       !(attention_mask.scalar_type() == torch::kBool ||
         c10::isIntegralType(attention_mask.scalar_type(), /*includeBool=*/false)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "M-RoPE positions: attention_mask has shape ", models::ShapeString(attention_mask),
        ", expected an integer (B, T) = ", models::ShapeString(input_ids), " like input_ids"));
  }
  if (merge <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("M-RoPE positions: spatial_merge_size must be positive, got ", merge));
  }
  for (size_t i = 0; i < grids.size(); ++i) {
    if (grids[i].t <= 0 || grids[i].h <= 0 || grids[i].w <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("M-RoPE positions: image grid ", i, " (",
                                                     grids[i].t, ", ", grids[i].h, ", ", grids[i].w,
                                                     ") must be positive"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<torch::Tensor> MropePositionIds(const torch::Tensor& input_ids,
                                               const torch::Tensor& attention_mask,
                                               int64_t image_token_id,
                                               const std::vector<ImageGridThw>& image_grids,
                                               int64_t spatial_merge_size) {
  RETURN_IF_ERROR(CheckArguments(input_ids, attention_mask, image_grids, spatial_merge_size));
  const int64_t batch = input_ids.size(0), seq_len = input_ids.size(1);
  const auto ids = input_ids.to(torch::kCPU, torch::kLong).contiguous();
  torch::Tensor mask;
  if (attention_mask.defined()) {
    mask = attention_mask.to(torch::kCPU, torch::kLong).contiguous();
    if (!mask.eq(0).logical_or(mask.eq(1)).all().item<bool>()) {
      return absl::InvalidArgumentError("M-RoPE positions: attention_mask must hold only 0 and 1");
    }
  }
  auto positions = torch::zeros({3, batch, seq_len}, torch::kLong);
  auto pos = positions.accessor<int64_t, 3>();
  const auto id = ids.accessor<int64_t, 2>();
  const int64_t* keep = mask.defined() ? mask.data_ptr<int64_t>() : nullptr;
  size_t next_grid = 0;  // grid_iters[1]: one iterator over the whole batch
  for (int64_t b = 0; b < batch; ++b) {
    // current_input_ids[attention_mask[batch_idx].bool()]: the kept columns, in order.
    std::vector<int64_t> kept;
    for (int64_t j = 0; j < seq_len; ++j) {
      if (keep == nullptr || keep[b * seq_len + j] == 1) kept.push_back(j);
    }
    int64_t current_pos = 0;
    size_t start = 0;
    while (start < kept.size()) {
      const bool image = id[b][kept[start]] == image_token_id;
      size_t end = start + 1;
      while (end < kept.size() && (id[b][kept[end]] == image_token_id) == image) ++end;
      const int64_t run = static_cast<int64_t>(end - start);
      if (!image) {
        for (int64_t i = 0; i < run; ++i) {
          for (int a = 0; a < 3; ++a) pos[a][b][kept[start + i]] = current_pos + i;
        }
        current_pos += run;
      } else {
        if (next_grid >= image_grids.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "M-RoPE positions: row ", b, " has an image-token run (", run, " tokens of id ",
              image_token_id, ") with no image grid left: ", image_grids.size(), " grids given"));
        }
        const ImageGridThw& g = image_grids[next_grid];
        const int64_t lt = g.t, lh = g.h / spatial_merge_size, lw = g.w / spatial_merge_size;
        if (lt * lh * lw != run) {
          return absl::InvalidArgumentError(
              absl::StrCat("M-RoPE positions: image ", next_grid, "'s run in row ", b, " has ", run,
                           " image tokens, its grid (", g.t, ", ", g.h, ", ", g.w, ") with merge ",
                           spatial_merge_size, " makes ", lt * lh * lw));
        }
        ++next_grid;
        size_t k = start;
        for (int64_t ti = 0; ti < lt; ++ti) {
          for (int64_t hi = 0; hi < lh; ++hi) {
            for (int64_t wi = 0; wi < lw; ++wi, ++k) {
              pos[0][b][kept[k]] = ti + current_pos;
              pos[1][b][kept[k]] = hi + current_pos;
              pos[2][b][kept[k]] = wi + current_pos;
            }
          }
        }
        // current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size
        current_pos += std::max(g.h, g.w) / spatial_merge_size;
      }
      start = end;
    }
  }
  if (next_grid != image_grids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("M-RoPE positions: ", image_grids.size(),
                                                   " image grids given, input_ids hold ", next_grid,
                                                   " image-token runs (id ", image_token_id, ")"));
  }
  return positions.to(input_ids.device());
}

}  // namespace ditserve::text
