#include "models/text/qwen2_5_vl_vision_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::text {
namespace {

constexpr int64_t kMaxGridSide = int64_t{1} << 20;

absl::Status CheckGrid(const VisionGrid& g, size_t row, int64_t m) {
  for (const auto& [value, name] :
       {std::pair{g.t, "t"}, std::pair{g.h, "h"}, std::pair{g.w, "w"}}) {
    if (value < 1 || value > kMaxGridSide) {
      return absl::InvalidArgumentError(absl::StrCat("grid_thw row ", row, ": ", name, " = ", value,
                                                     " is outside [1, ", kMaxGridSide, "]"));
    }
  }
  if (g.h % m != 0 || g.w % m != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid_thw row ", row, ": h = ", g.h, " and w = ", g.w,
                     " must be multiples of spatial_merge_size (", m, ")"));
  }
  return absl::OkStatus();
}

// get_vision_position_ids: each merged token's m x m patches in row-major order, the merged tokens
// row-major, the whole frame repeated t times.
void AppendPositions(const VisionGrid& g, int64_t m, std::vector<int64_t>* out) {
  for (int64_t f = 0; f < g.t; ++f) {
    for (int64_t bh = 0; bh < g.h / m; ++bh) {
      for (int64_t bw = 0; bw < g.w / m; ++bw) {
        for (int64_t ih = 0; ih < m; ++ih) {
          for (int64_t iw = 0; iw < m; ++iw) {
            out->push_back(bh * m + ih);
            out->push_back(bw * m + iw);
          }
        }
      }
    }
  }
}

// get_vision_window_index for one grid: the frame's merged-token grid padded to whole windows of
// vm x vm, windows taken frame by frame, row-major, each window's tokens row-major; padding
// dropped. `offset`: the image's first merged token.
void AppendWindows(const VisionGrid& g, int64_t m, int64_t vm, int64_t offset, VisionLayout* out) {
  const int64_t lh = g.h / m, lw = g.w / m, unit = m * m;
  // transformers pads by vm - lh % vm, a whole empty row of windows when lh % vm == 0; those
  // windows are empty, and unique_consecutive removes their repeated boundaries.
  const int64_t windows_h = (lh + vm - lh % vm) / vm;
  const int64_t windows_w = (lw + vm - lw % vm) / vm;
  for (int64_t f = 0; f < g.t; ++f) {
    for (int64_t wy = 0; wy < windows_h; ++wy) {
      for (int64_t wx = 0; wx < windows_w; ++wx) {
        int64_t count = 0;
        for (int64_t r = wy * vm; r < std::min((wy + 1) * vm, lh); ++r) {
          for (int64_t c = wx * vm; c < std::min((wx + 1) * vm, lw); ++c) {
            out->window_index.push_back(offset + (f * lh + r) * lw + c);
            ++count;
          }
        }
        if (count > 0)
          out->cu_window_seqlens.push_back(out->cu_window_seqlens.back() + count * unit);
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<VisionGrid>> GridsFromTensor(const torch::Tensor& grid_thw,
                                                        int64_t spatial_merge_size) {
  if (!grid_thw.defined() || grid_thw.dim() != 2 || grid_thw.size(1) != 3 || grid_thw.size(0) < 1) {
    return absl::InvalidArgumentError(
        "grid_thw must be a (num_images, 3) tensor with at least one row");
  }
  if (!at::isIntegralType(grid_thw.scalar_type(), /*includeBool=*/false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid_thw must hold integers, got ", c10::toString(grid_thw.scalar_type())));
  }
  const auto host = grid_thw.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* p = host.data_ptr<int64_t>();
  std::vector<VisionGrid> grids;
  for (int64_t i = 0; i < host.size(0); ++i) {
    VisionGrid g{p[3 * i], p[3 * i + 1], p[3 * i + 2]};
    RETURN_IF_ERROR(CheckGrid(g, static_cast<size_t>(i), spatial_merge_size));
    grids.push_back(g);
  }
  return grids;
}

int64_t TotalPatches(const std::vector<VisionGrid>& grids) {
  int64_t total = 0;
  for (const VisionGrid& g : grids) total += g.t * g.h * g.w;
  return total;
}

absl::StatusOr<VisionLayout> ComputeVisionLayout(const std::vector<VisionGrid>& grids,
                                                 int64_t spatial_merge_size,
                                                 int64_t merger_window_size) {
  const int64_t m = spatial_merge_size, vm = merger_window_size;
  if (grids.empty()) return absl::InvalidArgumentError("no image grids");
  if (m < 1 || vm < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spatial_merge_size (", m, ") and merger_window_size (", vm, ") must be positive"));
  }
  VisionLayout out;
  out.cu_seqlens = {0};
  out.cu_window_seqlens = {0};
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    RETURN_IF_ERROR(CheckGrid(g, i, m));
    const int64_t merged = g.t * (g.h / m) * (g.w / m);
    AppendPositions(g, m, &out.position_ids);
    AppendWindows(g, m, vm, out.num_merged, &out);
    for (int64_t f = 0; f < g.t; ++f) out.cu_seqlens.push_back(out.cu_seqlens.back() + g.h * g.w);
    out.merged_per_image.push_back(merged);
    out.num_merged += merged;
    out.num_patches += g.t * g.h * g.w;
  }
  out.reverse_index.assign(out.window_index.size(), 0);
  for (size_t i = 0; i < out.window_index.size(); ++i) {
    out.reverse_index[out.window_index[i]] = static_cast<int64_t>(i);
  }
  return out;
}

torch::Tensor PermuteRowGroups(const torch::Tensor& x, const torch::Tensor& index, int64_t group) {
  const int64_t n = x.size(0), d = x.size(1);
  return x.reshape({n / group, group, d}).index_select(0, index).reshape({n, d});
}

}  // namespace ditserve::text
