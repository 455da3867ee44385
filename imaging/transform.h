// Geometry helpers on RgbImage that diffusers' preprocessing performs with PIL: Image.crop (integer
// box), the centre crop of Flux2ImageProcessor._resize_and_crop / VaeImageProcessor crops, and the
// eight EXIF orientations of ImageOps.exif_transpose (Image.transpose). Pure functions,
// thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "imaging/image.h"

namespace ditserve::imaging {

// PIL's image.crop((left, top, left + width, top + height)) for a box inside the image.
// INVALID_ARGUMENT when the box is empty or not inside the image (PIL would pad with black; no
// diffusers processor asks for that).
absl::StatusOr<RgbImage> Crop(const RgbImage& image, int left, int top, int width, int height);

// Flux2ImageProcessor._resize_and_crop: left = (W - width) // 2, top = (H - height) // 2, then
// Crop. INVALID_ARGUMENT when width > W or height > H (or either < 1).
absl::StatusOr<RgbImage> CenterCrop(const RgbImage& image, int width, int height);

// The largest multiple of `multiple` not above each side, centre-cropped: what the FLUX.2 pipeline
// does to a reference image after its area resize (`(w // 16) * 16`, then preprocess with
// resize_mode="crop" to exactly that size, which is a centre crop with no resize).
// INVALID_ARGUMENT when a side would become 0.
absl::StatusOr<RgbImage> CropToMultiple(const RgbImage& image, int multiple);

// ImageOps.exif_transpose for EXIF orientation 1..8 (2: mirror left-right, 3: rotate 180,
// 4: mirror top-bottom, 5: transpose, 6: rotate 270 (90 clockwise), 7: transverse, 8: rotate 90
// (90 counter-clockwise)); any other value returns the image unchanged, as Pillow does.
RgbImage ApplyExifOrientation(const RgbImage& image, int orientation);

}  // namespace ditserve::imaging
