#include "imaging/qwen2vl_image_processor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "imaging/python_round.h"
#include "imaging/resample.h"

namespace ditserve::imaging {
namespace {

absl::Status CheckConfig(const Qwen2VlImageConfig& config) {
  if (config.patch_size < 1 || config.temporal_patch_size < 1 || config.merge_size < 1) {
    return absl::InvalidArgumentError(
        "qwen2-vl image processor: patch_size, temporal_patch_size and merge_size must be >= 1");
  }
  if (config.min_pixels < 0 || config.max_pixels < 1) {
    return absl::InvalidArgumentError(
        "qwen2-vl image processor: min_pixels must be >= 0 and max_pixels >= 1");
  }
  if (!(config.rescale_factor > 0)) {
    return absl::InvalidArgumentError("qwen2-vl image processor: rescale_factor must be > 0");
  }
  for (double s : config.image_std) {
    if (s == 0) return absl::InvalidArgumentError("qwen2-vl image processor: image_std has a 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageSize> Qwen2VlSmartResize(int width, int height, int factor, int64_t min_pixels,
                                             int64_t max_pixels) {
  if (width < 1 || height < 1 || factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("smart resize: invalid size ", width, "x", height, " or factor ", factor));
  }
  const double h = height;
  const double w = width;
  const double f = factor;
  if (std::max(h, w) / std::min(h, w) > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("is ", width, "x", height,
                     "; the vision encoder's processor needs an aspect ratio of at "
                     "most 200"));
  }
  int64_t h_bar = static_cast<int64_t>(RoundHalfEven(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(RoundHalfEven(w / f)) * factor;
  const double area = static_cast<double>(static_cast<int64_t>(height) * width);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  if (h_bar < 1 || w_bar < 1 || h_bar > (int64_t{1} << 30) || w_bar > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("smart resize of ", width, "x", height, " gives ", w_bar, "x", h_bar));
  }
  ImageSize size;
  size.width = static_cast<int>(w_bar);
  size.height = static_cast<int>(h_bar);
  return size;
}

absl::StatusOr<std::array<int64_t, 3>> Qwen2VlGridThw(int width, int height,
                                                      const Qwen2VlImageConfig& config) {
  if (auto s = CheckConfig(config); !s.ok()) return s;
  auto size = Qwen2VlSmartResize(width, height, config.patch_size * config.merge_size,
                                 config.min_pixels, config.max_pixels);
  if (!size.ok()) return size.status();
  // One picture is one temporal patch (its frame repeated temporal_patch_size times).
  return std::array<int64_t, 3>{1, size->height / config.patch_size,
                                size->width / config.patch_size};
}

absl::StatusOr<RgbImage> Qwen2VlResizeImage(const RgbImage& image,
                                            const Qwen2VlImageConfig& config) {
  if (auto s = CheckConfig(config); !s.ok()) return s;
  auto size = Qwen2VlSmartResize(image.width, image.height, config.patch_size * config.merge_size,
                                 config.min_pixels, config.max_pixels);
  if (!size.ok()) return size.status();
  return ResizeTorchAntialias(image, size->width, size->height, ResampleFilter::kBicubic);
}

absl::Status Qwen2VlAppendPatches(const RgbImage& resized, const Qwen2VlImageConfig& config,
                                  Qwen2VlPixelValues* out) {
  if (auto s = CheckConfig(config); !s.ok()) return s;
  const int P = config.patch_size;
  const int T = config.temporal_patch_size;
  const int M = config.merge_size;
  if (resized.width < 1 || resized.height < 1 ||
      resized.pixels.size() != static_cast<size_t>(resized.width) * resized.height * 3) {
    return absl::InvalidArgumentError("qwen2-vl patches: not a valid RGB image");
  }
  if (resized.width % (P * M) != 0 || resized.height % (P * M) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("qwen2-vl patches: ", resized.width, "x", resized.height,
                     " is not a multiple of patch_size * merge_size = ", P * M));
  }
  const int64_t cols = int64_t{3} * T * P * P;
  if (out->cols != 0 && out->cols != cols) {
    return absl::InvalidArgumentError("qwen2-vl patches: another patch layout already in `out`");
  }
  // (float(x) - mean * (1 / rescale_factor)) / (std * (1 / rescale_factor)), all float32: the
  // fused rescale + normalize of TorchvisionBackend (torch.tensor(mean) is float32, the Python
  // scalar 1.0 / rescale_factor becomes a float32 operand).
  const float scale = static_cast<float>(1.0 / config.rescale_factor);
  float lut[3][256];
  for (int c = 0; c < 3; ++c) {
    const float m = static_cast<float>(config.image_mean[c]) * scale;
    const float s = static_cast<float>(config.image_std[c]) * scale;
    for (int x = 0; x < 256; ++x) lut[c][x] = (static_cast<float>(x) - m) / s;
  }
  const int gh = resized.height / P;
  const int gw = resized.width / P;
  const int64_t first_row = out->rows;
  out->cols = cols;
  out->rows += int64_t{gh} * gw;
  out->values.resize(static_cast<size_t>(out->rows * cols));
  // patchify: reshape(C, gh/M, M, P, gw/M, M, P).permute(gh/M, gw/M, M, M, C, P, P), the frame
  // repeated T times inside each channel (unsqueeze(6).expand), flattened.
  int64_t row = first_row;
  for (int bh = 0; bh < gh / M; ++bh) {
    for (int bw = 0; bw < gw / M; ++bw) {
      for (int mh = 0; mh < M; ++mh) {
        for (int mw = 0; mw < M; ++mw, ++row) {
          const int y0 = (bh * M + mh) * P;
          const int x0 = (bw * M + mw) * P;
          float* dst = &out->values[static_cast<size_t>(row * cols)];
          for (int c = 0; c < 3; ++c) {
            for (int t = 0; t < T; ++t) {
              for (int py = 0; py < P; ++py) {
                const uint8_t* src = &resized.pixels[resized.Offset(x0, y0 + py)] + c;
                for (int px = 0; px < P; ++px) *dst++ = lut[c][src[px * 3]];
              }
            }
          }
        }
      }
    }
  }
  out->grid_thw.push_back({1, gh, gw});
  return absl::OkStatus();
}

absl::StatusOr<Qwen2VlPixelValues> Qwen2VlPreprocess(const std::vector<RgbImage>& images,
                                                     const Qwen2VlImageConfig& config) {
  if (images.empty()) return absl::InvalidArgumentError("qwen2-vl image processor: no images");
  Qwen2VlPixelValues out;
  for (const RgbImage& image : images) {
    auto resized = Qwen2VlResizeImage(image, config);
    if (!resized.ok()) return resized.status();
    if (auto s = Qwen2VlAppendPatches(*resized, config, &out); !s.ok()) return s;
  }
  return out;
}

int64_t Qwen2VlImageTokenCount(const std::array<int64_t, 3>& grid_thw, int merge_size) {
  const int64_t merge_length = int64_t{merge_size} * merge_size;
  return merge_length < 1 ? 0 : grid_thw[0] * grid_thw[1] * grid_thw[2] / merge_length;
}

}  // namespace ditserve::imaging
