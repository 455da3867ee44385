// What diffusers does to a decoded RGB input image (decode.h: load_image's pixels) before the VAE
// encodes it, per pipeline, in PIL steps reproduced bit for bit (resample.h, transform.h); the
// normalisation to [-1, 1] and the VAE itself are the pipeline's. The reference is diffusers
// 58eb52c0:
//
// - Reference images (FLUX.2, Flux2Pipeline.__call__ step 4 "process images"): every image first
//   passes Flux2ImageProcessor.check_image_input (both sides >= min_side, max(w/h, h/w) <=
//   max_aspect_ratio); then an image above max_area pixels is resized to
//   (int(w * s), int(h * s)), s = sqrt(max_area / (w * h)) (Python floats: doubles), LANCZOS
//   (_resize_to_target_area); each side is floored to a multiple of `multiple_of` and the image
//   centre-cropped to it (preprocess(..., resize_mode="crop") = Flux2ImageProcessor's
//   _resize_and_crop: left = (W - w) // 2, top = (H - h) // 2). With no height / width the output
//   takes the FIRST reference's prepared size (`height = height or image_height`, per side).
// - Image to image (FLUX.1, FluxImg2ImgPipeline: image_processor.preprocess(image, height, width)):
//   one LANCZOS resize to the output size, each side floored to `multiple_of` (VaeImageProcessor's
//   get_default_height_width); a resize to the same size is a copy, as in Pillow.
// - Kontext (FLUX.1 Kontext, FluxKontextPipeline step 3 "Preprocess image" with _auto_resize):
//   the aspect ratio of the image's size floored to `multiple_of`, the
//   PREFERRED_KONTEXT_RESOLUTIONS entry (w, h) nearest to it by |aspect - w / h| (ties as Python's
//   min over the tuples (difference, w, h): the smaller w, then h), floored to `multiple_of`, and
//   one LANCZOS resize of the original image to it (the pipeline's second resize, inside
//   preprocess, is to the same size: a copy).
//
// `multiple_of` is the pipeline's vae_scale_factor * 2 (pipeline::ImageInputCard::size_multiple,
// ModelInfo.inputs.image_inputs.size_multiple). Every function is pure and thread-safe. Errors are
// INVALID_ARGUMENT with a message that does not name the image (callers prefix "images[i]").
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "imaging/image.h"

namespace ditserve::imaging {

struct ImageSize {
  int width = 0;
  int height = 0;
  bool operator==(const ImageSize& o) const { return width == o.width && height == o.height; }
};

// Flux2ImageProcessor.check_image_input on a width x height image: each side >= min_side (0: any),
// and max(w / h, h / w) <= max_aspect_ratio (0: any), computed in double as Python does. The
// messages name the size and the limit ("is 63x200; each side must be at least 64 pixels").
absl::Status CheckImageShape(int width, int height, int64_t min_side, int64_t max_aspect_ratio);

// The size a reference image of width x height becomes (the area resize when above max_area,
// 0: never, then the floor to multiple_of). INVALID_ARGUMENT when a side would become 0.
absl::StatusOr<ImageSize> ReferencePreparedSize(int width, int height, int64_t max_area,
                                                int multiple_of);
// The reference image as the pipeline hands it to the VAE (no check_image_input: call
// CheckImageShape first, on every image before preparing any, as the pipeline does).
absl::StatusOr<RgbImage> PrepareReferenceImage(const RgbImage& image, int64_t max_area,
                                               int multiple_of);

// The image-to-image input for an output of width x height (each floored to multiple_of).
absl::StatusOr<RgbImage> PrepareImageToImage(const RgbImage& image, int width, int height,
                                             int multiple_of);

// The Kontext resolution for an image of width x height (see above). INVALID_ARGUMENT when a side
// is below multiple_of (diffusers would divide by zero).
absl::StatusOr<ImageSize> KontextPreparedSize(int width, int height, int multiple_of);
absl::StatusOr<RgbImage> PrepareKontextImage(const RgbImage& image, int multiple_of);

}  // namespace ditserve::imaging
