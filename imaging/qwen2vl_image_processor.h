// transformers' Qwen2VLImageProcessor on the host: what the `processor` of diffusers'
// QwenImageEditPlusPipeline (a Qwen2VLProcessor) makes of the pipeline's condition images
// (`images=` in _get_qwen_prompt_embeds) before Qwen2.5-VL's vision tower: `pixel_values` and
// `image_grid_thw`. The reference is transformers 5.17.0 with torchvision installed, whose
// AutoImageProcessor / Qwen2VLProcessor.from_pretrained picks the torchvision backend
// (models/qwen2_vl/image_processing_qwen2_vl.py, class Qwen2VLImageProcessor(TorchvisionBackend));
// tests/unit/data/make_qwen2vl_cases.py records what it does. Per image, in order:
//
// 1. SmartResize (smart_resize): sides multiples of factor = patch_size * merge_size, area within
//    [min_pixels, max_pixels] (the config's size.shortest_edge / size.longest_edge).
// 2. The image (uint8, pil_to_tensor) resized to that size with torch's antialiased uint8 bicubic
//    (TorchvisionBackend.resize: tvF.resize(..., interpolation=BICUBIC, antialias=True);
//    resample = PILImageResampling.BICUBIC maps to InterpolationMode.BICUBIC):
//    ResizeTorchAntialias (resample.h), not Pillow's BICUBIC. The same size is a copy.
// 3. Rescale and normalise fused, in float32 (_fuse_mean_std_and_rescale_factor + tvF.normalize):
//    v = (float(x) - m) / s with m = float32(mean) * float32(1 / rescale_factor) and s likewise.
// 4. patchify: the (C, H, W) image reshaped to (C, gh / M, M, P, gw / M, M, P), permuted to
//    (gh / M, gw / M, M, M, C, P, P), the frame repeated temporal_patch_size times inside each
//    channel (unsqueeze(6).expand: a single image is T identical frames) and flattened to
//    (gh * gw, C * T * P * P) (P = patch_size, T = temporal_patch_size, M = merge_size,
//    gh = height / P, gw = width / P; grid_thw = (1, gh, gw)): row ((bh * gw/M + bw) * M + mh) * M
//    + mw holds the patch whose top-left pixel is (x, y) = ((bw * M + mw) * P, (bh * M + mh) * P),
//    so each M x M group of patches (one merged vision token) is M * M consecutive rows; within a
//    row, column ((c * T + t) * P + py) * P + px holds channel c of frame t at (px, py) in the
//    patch. (transformers 4's numpy version, reshape(grid_t, T, C, gh/M, M, P, gw/M, M, P)
//    .transpose(0, 3, 6, 4, 7, 2, 1, 5, 8), gives the same layout.)
// Several images: their rows one after another, one grid_thw each (the processor's order).
//
// Pure functions, thread-safe. Errors are INVALID_ARGUMENT with a message that does not name the
// image (callers prefix "images[i]").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "imaging/image.h"
#include "imaging/preprocess.h"

namespace ditserve::imaging {

// The image processor's settings (preprocessor_config.json). Defaults: the class defaults of
// Qwen2VLImageProcessor (size {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}, CLIP
// mean / std); Qwen2.5-VL's preprocessor_config.json sets max_pixels 12845056 (28 * 28 * 16384).
struct Qwen2VlImageConfig {
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OPENAI_CLIP_MEAN
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};  // OPENAI_CLIP_STD
};

// What the vision tower gets for a list of images.
struct Qwen2VlPixelValues {
  int64_t rows = 0;           // sum over the images of grid_t * grid_h * grid_w
  int64_t cols = 0;           // 3 * temporal_patch_size * patch_size * patch_size (1176 by default)
  std::vector<float> values;  // rows x cols, row-major
  std::vector<std::array<int64_t, 3>> grid_thw;  // image_grid_thw: (t, h, w) in patches, per image
};

// smart_resize(height, width, factor, min_pixels, max_pixels), Python's arithmetic in doubles
// (round is half to even):
//   if max(h, w) / min(h, w) > 200: error
//   h_bar = round(h / factor) * factor; w_bar = round(w / factor) * factor
//   if h_bar * w_bar > max_pixels: beta = sqrt(h * w / max_pixels);
//       h_bar = max(factor, floor(h / beta / factor) * factor)  (w_bar likewise)
//   elif h_bar * w_bar < min_pixels: beta = sqrt(min_pixels / (h * w));
//       h_bar = ceil(h * beta / factor) * factor  (w_bar likewise)
// Returns {width: w_bar, height: h_bar}. INVALID_ARGUMENT for a side < 1, factor < 1, an aspect
// ratio above 200, or a result with a side of 0 (min_pixels 0 and a side below factor / 2).
absl::StatusOr<ImageSize> Qwen2VlSmartResize(int width, int height, int factor, int64_t min_pixels,
                                             int64_t max_pixels);

// image_grid_thw of one width x height image, from its size alone (step 1, then step 4's grid):
// (1, h_bar / patch_size, w_bar / patch_size). What Qwen2VlPreprocess gives for the image.
absl::StatusOr<std::array<int64_t, 3>> Qwen2VlGridThw(int width, int height,
                                                      const Qwen2VlImageConfig& config);

// Steps 1-2: the image at its smart size, as the processor resizes it (uint8).
absl::StatusOr<RgbImage> Qwen2VlResizeImage(const RgbImage& image,
                                            const Qwen2VlImageConfig& config);

// Steps 3-4 on an image already at a size whose sides are multiples of patch_size * merge_size:
// appends its rows to `out` (setting out->cols) and its grid to out->grid_thw.
absl::Status Qwen2VlAppendPatches(const RgbImage& resized, const Qwen2VlImageConfig& config,
                                  Qwen2VlPixelValues* out);

// The whole processor on a list of images (at least one): pixel_values and image_grid_thw.
absl::StatusOr<Qwen2VlPixelValues> Qwen2VlPreprocess(const std::vector<RgbImage>& images,
                                                     const Qwen2VlImageConfig& config);

// How many <|image_pad|> tokens the processor's text side expands one image to:
// grid_t * grid_h * grid_w / merge_size^2 (Qwen2VLProcessor: image_grid_thw[i].prod() //
// merge_length).
int64_t Qwen2VlImageTokenCount(const std::array<int64_t, 3>& grid_thw, int merge_size);

}  // namespace ditserve::imaging
