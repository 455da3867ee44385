#include "imaging/resample.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::imaging {
namespace {

// --- Filters (Resample.c): each a function of the distance in source pixels and its support. ---

double BoxFilter(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

double BilinearFilter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double HammingFilter(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}

double BicubicFilter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double LanczosFilter(double x) {
  if (-3.0 <= x && x < 3.0) return Sinc(x) * Sinc(x / 3);
  return 0.0;
}

struct Filter {
  double (*fn)(double);
  double support;
};

Filter FilterFor(ResampleFilter filter) {
  switch (filter) {
    case ResampleFilter::kBox: return {BoxFilter, 0.5};
    case ResampleFilter::kBilinear: return {BilinearFilter, 1.0};
    case ResampleFilter::kHamming: return {HammingFilter, 1.0};
    case ResampleFilter::kBicubic: return {BicubicFilter, 2.0};
    case ResampleFilter::kLanczos:
    case ResampleFilter::kNearest: break;
  }
  return {LanczosFilter, 3.0};
}

// Pillow's fixed point: 22 fractional bits (PRECISION_BITS = 32 - 8 - 2).
constexpr int kPillowPrecisionBits = 32 - 8 - 2;

// How the normalised double weights become integers.
enum class FixedPoint {
  kPillow,      // normalize_coeffs_8bpc: always kPillowPrecisionBits
  kTorchInt16,  // _compute_index_ranges_int16_weights: the most bits that keep the axis' largest
                // weight below 1 << 15 (int16), chosen per axis
};

// One axis' taps: for output index i, `count[i]` source samples starting at `first[i]`, weights
// coeffs[i * ksize .. + count[i]) in `precision`-bit fixed point.
struct Taps {
  int ksize = 0;
  int precision = kPillowPrecisionBits;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> coeffs;
};

// precompute_coeffs + normalize_coeffs_8bpc: the double arithmetic in Pillow's order. torch's
// _compute_indices_min_size_weights_aa computes the same doubles (center = scale * (i + 0.5),
// bounds truncated from center -/+ support + 0.5, weights of (j + xmin - center + 0.5) /
// filterscale divided by their sum); only the fixed point differs.
Taps ComputeTaps(int in_size, float in0, float in1, int out_size, const Filter& filter,
                 FixedPoint fixed = FixedPoint::kPillow) {
  double scale = static_cast<double>(in1 - in0) / out_size;  // float difference, as in Pillow
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  Taps taps;
  taps.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.coeffs.assign(static_cast<size_t>(out_size) * taps.ksize, 0);
  std::vector<double> k(static_cast<size_t>(out_size) * taps.ksize, 0.0);
  double weight_max = 0.0;  // torch's wt_max: the largest normalised weight of the axis
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    // xmax <= ksize: the support spans at most 2 * ceil(support) + 1 samples.
    if (xmax > taps.ksize) xmax = taps.ksize;
    double* kk = &k[static_cast<size_t>(xx) * taps.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double w = filter.fn((x + xmin - center + 0.5) * ss);
      kk[x] = w;
      ww += w;
    }
    if (ww != 0.0) {
      for (int x = 0; x < xmax; ++x) {
        kk[x] /= ww;
        if (kk[x] > weight_max) weight_max = kk[x];
      }
    }
    taps.first[xx] = xmin;
    taps.count[xx] = xmax < 0 ? 0 : xmax;
  }
  if (fixed == FixedPoint::kTorchInt16) {
    // for (p = 0; p < 22; ++p) if ((int)(0.5 + wt_max * (1 << (p + 1))) >= (1 << 15)) break;
    int p = 0;
    for (; p < 22; ++p) {
      if (static_cast<int>(0.5 + weight_max * (1 << (p + 1))) >= (1 << 15)) break;
    }
    taps.precision = p;
  }
  for (size_t i = 0; i < k.size(); ++i) {
    const double v = k[i] * (1 << taps.precision);
    taps.coeffs[i] = v < 0 ? static_cast<int32_t>(-0.5 + v) : static_cast<int32_t>(0.5 + v);
  }
  return taps;
}

// clip8: Pillow's table covers sum >> 22 in [-640, 639]; below 0 is 0, above 255 is 255 (torch:
// std::clamp(sum >> precision, 0, 255), the same).
inline uint8_t Clip8(int32_t sum, int precision) {
  const int32_t v = sum >> precision;
  return v < 0 ? 0 : v > 255 ? 255 : static_cast<uint8_t>(v);
}

// ImagingResampleHorizontal_8bpc over rows [row0, row0 + rows) of `in`.
RgbImage Horizontal(const RgbImage& in, int row0, int rows, int out_width, const Taps& taps) {
  RgbImage out = MakeRgbImage(out_width, rows);
  for (int yy = 0; yy < rows; ++yy) {
    const uint8_t* line = &in.pixels[in.Offset(0, row0 + yy)];
    uint8_t* dst = &out.pixels[out.Offset(0, yy)];
    for (int xx = 0; xx < out_width; ++xx) {
      const int32_t* k = &taps.coeffs[static_cast<size_t>(xx) * taps.ksize];
      const uint8_t* src = line + static_cast<size_t>(taps.first[xx]) * 3;
      int32_t s0 = 1 << (taps.precision - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < taps.count[xx]; ++x) {
        s0 += src[x * 3 + 0] * k[x];
        s1 += src[x * 3 + 1] * k[x];
        s2 += src[x * 3 + 2] * k[x];
      }
      dst[xx * 3 + 0] = Clip8(s0, taps.precision);
      dst[xx * 3 + 1] = Clip8(s1, taps.precision);
      dst[xx * 3 + 2] = Clip8(s2, taps.precision);
    }
  }
  return out;
}

// ImagingResampleVertical_8bpc; taps.first is relative to `in`'s first row.
RgbImage Vertical(const RgbImage& in, int out_height, const Taps& taps, int row_shift) {
  RgbImage out = MakeRgbImage(in.width, out_height);
  const size_t row_bytes = in.RowBytes();
  for (int yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &taps.coeffs[static_cast<size_t>(yy) * taps.ksize];
    const uint8_t* base =
        in.pixels.data() + static_cast<size_t>(taps.first[yy] - row_shift) * row_bytes;
    uint8_t* dst = &out.pixels[out.Offset(0, yy)];
    for (size_t i = 0; i < row_bytes; ++i) {
      int32_t s = 1 << (taps.precision - 1);
      for (int y = 0; y < taps.count[yy]; ++y) s += base[y * row_bytes + i] * k[y];
      dst[i] = Clip8(s, taps.precision);
    }
  }
  return out;
}

RgbImage Convolve(const RgbImage& image, int width, int height, const Filter& filter,
                  const ResizeBox& box, FixedPoint fixed = FixedPoint::kPillow) {
  const bool need_horizontal = width != image.width || box.left != 0 || box.right != width;
  const bool need_vertical = height != image.height || box.top != 0 || box.bottom != height;
  const Taps vert = ComputeTaps(image.height, box.top, box.bottom, height, filter, fixed);
  // Rows of the source the vertical pass reads.
  const int ybox_first = vert.first[0];
  const int ybox_last = vert.first[height - 1] + vert.count[height - 1];
  if (need_horizontal) {
    const Taps horiz = ComputeTaps(image.width, box.left, box.right, width, filter, fixed);
    RgbImage temp = Horizontal(image, ybox_first, ybox_last - ybox_first, width, horiz);
    if (!need_vertical) return temp;
    return Vertical(temp, height, vert, ybox_first);
  }
  if (need_vertical) return Vertical(image, height, vert, 0);
  return image;
}

// ImagingScaleAffine with fill: Resize's NEAREST path.
RgbImage Nearest(const RgbImage& image, int width, int height, const ResizeBox& box) {
  const double a0 = static_cast<double>(box.right - box.left) / width;
  const double a4 = static_cast<double>(box.bottom - box.top) / height;
  const double a2 = box.left;
  const double a5 = box.top;
  auto coord = [](double v) { return v < 0.0 ? -1 : static_cast<int>(v); };
  std::vector<int> xin(width, 0);
  int xmin = width, xmax = 0;
  double xo = a2 + a0 * 0.5;
  for (int x = 0; x < width; ++x) {
    const int xi = coord(xo);
    if (xi >= 0 && xi < image.width) {
      xmax = x + 1;
      if (x < xmin) xmin = x;
      xin[x] = xi;
    }
    xo += a0;
  }
  RgbImage out = MakeRgbImage(width, height);  // filled with 0, as Pillow's `fill`
  double yo = a5 + a4 * 0.5;
  for (int y = 0; y < height; ++y) {
    const int yi = coord(yo);
    if (yi >= 0 && yi < image.height) {
      for (int x = xmin; x < xmax; ++x) {
        std::memcpy(&out.pixels[out.Offset(x, y)], &image.pixels[image.Offset(xin[x], yi)], 3);
      }
    }
    yo += a4;
  }
  return out;
}

// What every resize refuses: an image whose pixels do not match its size, an empty target, a
// target over `max_output_pixels`.
absl::Status CheckResizeArguments(const RgbImage& image, int width, int height,
                                  int64_t max_output_pixels) {
  if (image.width < 1 || image.height < 1 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError("resize: not a valid RGB image");
  }
  if (width < 1 || height < 1) {
    return absl::InvalidArgumentError("resize: height and width must be > 0");
  }
  if (static_cast<int64_t>(width) * height > max_output_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resize: ", width, "x", height, " exceeds the limit of ", max_output_pixels, " pixels"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RgbImage> Resize(const RgbImage& image, int width, int height, ResampleFilter filter,
                                std::optional<ResizeBox> box_arg, int64_t max_output_pixels) {
  RETURN_IF_ERROR(CheckResizeArguments(image, width, height, max_output_pixels));
  ResizeBox box;
  box.right = static_cast<float>(image.width);
  box.bottom = static_cast<float>(image.height);
  if (box_arg.has_value()) box = *box_arg;
  if (!(box.left >= 0) || !(box.top >= 0)) {
    return absl::InvalidArgumentError("resize: box offset can't be negative");
  }
  if (!(box.right <= image.width) || !(box.bottom <= image.height)) {
    return absl::InvalidArgumentError("resize: box can't exceed original image size");
  }
  if (!(box.right - box.left >= 0) || !(box.bottom - box.top >= 0)) {
    return absl::InvalidArgumentError("resize: box can't be empty");
  }
  // Image.resize: same size and the whole image: a copy.
  if (width == image.width && height == image.height && box.left == 0 && box.top == 0 &&
      box.right == image.width && box.bottom == image.height) {
    return image;
  }
  // _imaging.c _resize: an integer-origin box of exactly the output size is a crop.
  if (box.left - static_cast<int>(box.left) == 0 && box.right - box.left == width &&
      box.top - static_cast<int>(box.top) == 0 && box.bottom - box.top == height) {
    const int left = static_cast<int>(box.left);
    const int top = static_cast<int>(box.top);
    RgbImage out = MakeRgbImage(width, height);
    for (int y = 0; y < height; ++y) {
      std::memcpy(&out.pixels[out.Offset(0, y)], &image.pixels[image.Offset(left, top + y)],
                  out.RowBytes());
    }
    return out;
  }
  if (filter == ResampleFilter::kNearest) return Nearest(image, width, height, box);
  return Convolve(image, width, height, FilterFor(filter), box);
}

absl::StatusOr<RgbImage> ResizeTorchAntialias(const RgbImage& image, int width, int height,
                                              ResampleFilter filter, int64_t max_output_pixels) {
  if (filter != ResampleFilter::kBilinear && filter != ResampleFilter::kBicubic) {
    return absl::InvalidArgumentError(
        "resize: torch's antialiased uint8 resize is bilinear or bicubic only");
  }
  RETURN_IF_ERROR(CheckResizeArguments(image, width, height, max_output_pixels));
  // torchvision's resize_image returns the input when the size is unchanged (torch copies too).
  if (width == image.width && height == image.height) return image;
  ResizeBox whole;
  whole.right = static_cast<float>(image.width);
  whole.bottom = static_cast<float>(image.height);
  return Convolve(image, width, height, FilterFor(filter), whole, FixedPoint::kTorchInt16);
}

absl::StatusOr<ResampleFilter> ResampleFilterFromName(absl::string_view name) {
  if (name == "lanczos") return ResampleFilter::kLanczos;
  if (name == "bicubic") return ResampleFilter::kBicubic;
  if (name == "bilinear" || name == "linear") return ResampleFilter::kBilinear;
  if (name == "nearest") return ResampleFilter::kNearest;
  if (name == "box") return ResampleFilter::kBox;
  if (name == "hamming") return ResampleFilter::kHamming;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown resampling filter '", name,
                   "' (lanczos, bicubic, bilinear, linear, nearest, box, hamming)"));
}

}  // namespace ditserve::imaging
