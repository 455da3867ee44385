// What diffusers' QwenImageEditPlusPipeline (58eb52c0, pipeline_qwenimage_edit_plus.py, __call__
// step 3 "Preprocess image") does with each input image before its two encoders, and the output
// size it defaults to, in PIL steps reproduced bit for bit (resample.h). For every image `img`
// (a decoded RGB image, decode.h), in the order given:
//
//   image_width, image_height = img.size
//   condition_width, condition_height = calculate_dimensions(CONDITION_IMAGE_SIZE,
//                                                            image_width / image_height)
//   vae_width, vae_height = calculate_dimensions(VAE_IMAGE_SIZE, image_width / image_height)
//   condition_images.append(self.image_processor.resize(img, condition_height, condition_width))
//   vae_images.append(self.image_processor.preprocess(img, vae_height, vae_width).unsqueeze(2))
//
// with CONDITION_IMAGE_SIZE = 384 * 384, VAE_IMAGE_SIZE = 1024 * 1024 and
//
//   def calculate_dimensions(target_area, ratio):
//       width = math.sqrt(target_area * ratio)
//       height = width / ratio
//       width = round(width / 32) * 32
//       height = round(height / 32) * 32
//       return width, height
//
// (Python floats: doubles; round is half to even). `image_processor` is
// VaeImageProcessor(vae_scale_factor=vae_scale_factor * 2) with the default resample "lanczos" and
// reducing_gap None: `resize` is PIL's image.resize((width, height), LANCZOS); `preprocess` first
// floors each side to a multiple of its vae_scale_factor (16 for Qwen-Image's VAE; the VAE sizes
// are multiples of 32 already), then the same resize (a copy when the size is unchanged), then
// the [-1, 1] normalisation, which is the pipeline's. The condition images go to the processor
// (qwen2vl_image_processor.h), the VAE images to the VAE encoder.
//
// The output size: from the LAST image, `calculate_dimensions(1024 * 1024, w / h)`, each side used
// only where the caller gave none (`height = height or calculated_height`), then each floored to
// `multiple_of` = vae_scale_factor * 2.
//
// Pure functions, thread-safe. Errors are INVALID_ARGUMENT with a message that does not name the
// image (callers prefix "images[i]").
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "imaging/image.h"
#include "imaging/preprocess.h"

namespace ditserve::imaging {

inline constexpr int64_t kQwenEditConditionArea = 384 * 384;  // CONDITION_IMAGE_SIZE
inline constexpr int64_t kQwenEditVaeArea = 1024 * 1024;      // VAE_IMAGE_SIZE
inline constexpr int64_t kQwenEditOutputArea = 1024 * 1024;   // __call__'s default output area

// calculate_dimensions(target_area, width / height) for a width x height image (may give 0 for a
// side at extreme aspect ratios; the functions below refuse that). Both sides must be >= 1.
ImageSize QwenEditCalculateDimensions(int64_t target_area, int width, int height);

// The two sizes one input image is resized to.
struct QwenEditImageSizes {
  ImageSize condition;  // for the vision tower (CONDITION_IMAGE_SIZE)
  ImageSize vae;        // for the VAE (VAE_IMAGE_SIZE), after preprocess' floor to vae_multiple
};
// INVALID_ARGUMENT when a side would be 0 (PIL's resize refuses it too). `condition_area`: the
// condition image's target area (QwenImageEditPipeline's is kQwenEditVaeArea: its one resized
// image feeds both encoders).
absl::StatusOr<QwenEditImageSizes> QwenEditImageSizesFor(
    int width, int height, int vae_multiple, int64_t condition_area = kQwenEditConditionArea);

// The output size for a call whose last image is last_width x last_height and whose requested
// width / height are `width` / `height` (0: not given, as Python's `or` treats it).
// INVALID_ARGUMENT when a side would be 0.
absl::StatusOr<ImageSize> QwenEditOutputSize(int last_width, int last_height, int width, int height,
                                             int multiple_of);

// The condition image (image_processor.resize to the condition size, LANCZOS).
absl::StatusOr<RgbImage> PrepareQwenEditConditionImage(
    const RgbImage& image, int64_t condition_area = kQwenEditConditionArea);
// The VAE image before normalisation (image_processor.preprocess to the VAE size, LANCZOS).
// vae_multiple: the pipeline's VaeImageProcessor's vae_scale_factor (vae_scale_factor * 2 = 16).
absl::StatusOr<RgbImage> PrepareQwenEditVaeImage(const RgbImage& image, int vae_multiple);

}  // namespace ditserve::imaging
