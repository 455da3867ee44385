// Pillow's Image.resize(size, resample, box) on 8-bit RGB, bit for bit (Pillow 9.4 = Debian 12's
// python3-pil, whose 8-bit path is unchanged in Pillow 12): diffusers resizes every PIL input with
// it (VaeImageProcessor.resize: LANCZOS by default, `reducing_gap=None`; Flux2ImageProcessor's
// area resize: LANCZOS), so parity with diffusers on any image that needs resizing depends on it.
//
// What is reproduced (src/libImaging/Resample.c, Geometry.c, _imaging.c `_resize`):
// - BOX, BILINEAR, HAMMING, BICUBIC (a = -0.5), LANCZOS (a = 3): the separable convolution, each
//   output pixel's taps from the filter's support scaled by max(1, in/out), normalised in double,
//   then turned into 22-bit fixed point (round half away from zero); each pass accumulates ints
//   from 1 << 21 and clips `sum >> 22` to 0..255. The horizontal pass runs first (only over the
//   rows the vertical pass reads), then the vertical pass; a pass is skipped when its axis is
//   unchanged (same size, box spanning that axis exactly). The 8-bit intermediate between the two
//   passes is part of the result.
// - NEAREST: Pillow's affine scale, source coordinate accumulated in double from
//   box0 + scale / 2 in steps of `scale` and truncated (a coordinate past the edge leaves the
//   pixel black, as in Pillow).
// - A box with integer origin whose size equals the output size is a plain crop; no box and the
//   same size is a copy.
// Box coordinates are C floats, as Pillow parses them. Reducing_gap (Image.reduce first) is not
// implemented: diffusers never passes it.
//
// The coefficients use libm's sin/cos; results are exact against Pillow built with the same libm
// and no FMA contraction (x86-64; the library is compiled with -ffp-contract=off).
// Pure functions, thread-safe. Memory: the output plus one intermediate of
// out_width x (rows read) and the coefficient tables.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "imaging/image.h"

namespace ditserve::imaging {

// Pillow's Image.Resampling values, by name.
enum class ResampleFilter { kNearest, kBox, kBilinear, kHamming, kBicubic, kLanczos };

// PIL's `box`: the source region (left, upper, right, lower) in pixels, fractional allowed.
struct ResizeBox {
  float left = 0;
  float top = 0;
  float right = 0;
  float bottom = 0;
};

// Image.resize((width, height), filter, box). INVALID_ARGUMENT, with Pillow's reasons, when width
// or height < 1, the box has a negative offset, exceeds the image or is empty, or the output
// would exceed `max_output_pixels` (a guard for callers, default 64 Mi pixels; Pillow has none).
absl::StatusOr<RgbImage> Resize(const RgbImage& image, int width, int height,
                                ResampleFilter filter,
                                std::optional<ResizeBox> box = std::nullopt,
                                int64_t max_output_pixels = int64_t{1} << 26);

// torch's antialiased resize of a uint8 image: torch.nn.functional.interpolate(x, size=(height,
// width), mode="bicubic" | "bilinear", align_corners=False, antialias=True) on a uint8 (N, C <= 4,
// H, W) CPU tensor, which torchvision's `resize(..., antialias=True)` runs natively for uint8
// input on the CPU (transformers 5's TorchvisionBackend.resize: Qwen2VLImageProcessor's resize,
// see qwen2vl_image_processor.h). Bit for bit (aten/src/ATen/native/cpu/UpSampleKernel.cpp,
// UpSampleKernelAVXAntialias.h; the AVX2 and the portable kernels compute the same integers):
// - the same separable passes as Pillow's (horizontal first, then vertical, each skipped when its
//   axis is unchanged, 8-bit intermediate) with the same double weights (bicubic: a = -0.5,
//   support 2; bilinear: support 1; scaled by max(1, in / out); normalised by their sum);
// - but the fixed point is int16, chosen per axis: p = the first p in 0..21 with
//   (int)(0.5 + wt_max * 2^(p + 1)) >= 2^15 (wt_max: the axis' largest normalised weight), else
//   22; weights round(w * 2^p) as Pillow rounds; each pass accumulates from 1 << (p - 1) and
//   clamps `sum >> p` to 0..255.
// So it differs from Resize(..., kBicubic) by a level here and there. Same size: a copy. No box.
// Bicubic is checked against torch 2.11 (qwen2vl_image_processor_test); bilinear runs the same
// code with its own filter, unchecked. INVALID_ARGUMENT for another filter, an invalid image,
// width or height < 1, or more than max_output_pixels.
absl::StatusOr<RgbImage> ResizeTorchAntialias(const RgbImage& image, int width, int height,
                                              ResampleFilter filter,
                                              int64_t max_output_pixels = int64_t{1} << 26);

// "lanczos", "bicubic", "bilinear"/"linear", "nearest", "box", "hamming" (diffusers'
// PIL_INTERPOLATION names plus Pillow's other two). INVALID_ARGUMENT otherwise.
absl::StatusOr<ResampleFilter> ResampleFilterFromName(absl::string_view name);

}  // namespace ditserve::imaging
