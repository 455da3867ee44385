// A request's input images (GenerateRequest.images) and `strength`, checked against the served
// model's ModelInfo.inputs.image_inputs and the server's limits (--max-input-image-*), decoded
// (imaging/decode.h: diffusers' load_image) and prepared as the model's diffusers pipeline does
// (imaging/preprocess.h; "qwen_edit": imaging/qwen_edit_sizes.h), into the RgbPixels the workers
// receive (RunItem.images, and for "qwen_edit" RunItem.condition_images too).
//
// Order of the checks, each error INVALID_ARGUMENT naming the field and the limit:
//   1. the count: "images: <model> takes no input image" (max_images 0), "images: this model
//      takes at most N input images, got M", "images: this model needs at least N input images,
//      got M" (min_images);
//   2. `strength`: in [0, 1] (not NaN); non-zero only with use "image_to_image" and an image;
//   3. per image i, in order: empty, bytes > max_image_bytes, the format sniffed and the header's
//      size read (imaging::ReadImageHeader) against max_image_side and max_image_pixels BEFORE any
//      decoder runs (a decompression bomb never reaches one), the decode, the decoded size against
//      the model's min_side / max_aspect_ratio (Flux2ImageProcessor.check_image_input), and the
//      preparation ("qwen_edit": both of its images); every message starts with "images[i]".
// Decoding is CPU work (tens of ms for a large JPEG): it runs on the calling thread, which is the
// request's handler thread (ImageGenerationService::Prepare via ValidateRequest), never the
// dispatcher's. Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "imaging/image.h"
#include "server/frontend_options.h"

namespace ditserve::server {

// ModelInfo.inputs.image_inputs.use, parsed.
enum class ImageInputUse { kNone, kReference, kImageToImage, kKontext, kQwenEdit };

// A request's images after step 1..3 above.
struct DecodedInputImages {
  ImageInputUse use = ImageInputUse::kNone;
  int size_multiple = 16;  // ImageInputs.size_multiple (16 when the model gives none)
  // Reference and Kontext: prepared (their final pixels); qwen_edit: the VAE images
  // (imaging::PrepareQwenEditVaeImage); image to image: decoded only (sized to the output by
  // AddInputImages, once the output size is known).
  std::vector<imaging::RgbImage> images;
  // qwen_edit: each image's condition image for the vision-language text encoder
  // (imaging::PrepareQwenEditConditionImage), one per entry of `images`, in order; else empty.
  std::vector<imaging::RgbImage> condition_images;
  double strength = 0;  // image to image with an image: the request's or the model's default; else 0
  // The size a request without height / width gets, per side (0: the model's default):
  // reference: the first image's prepared size (Flux2Pipeline: `height = height or image_height`);
  // qwen_edit: imaging::QwenEditOutputSize from the LAST image's decoded size
  // (QwenImageEditPlusPipeline: `height = height or calculated_height`).
  uint32_t default_height = 0;
  uint32_t default_width = 0;
  // qwen_edit: a height / width the request gives is floored to size_multiple (the pipeline's
  // `height // multiple_of * multiple_of`) instead of being refused when it is not a multiple.
  bool floor_requested_size = false;
};

// Steps 1..3. `model` is the served model's description (its name and inputs.image_inputs).
absl::StatusOr<DecodedInputImages> DecodeInputImages(const v1::GenerateRequest& request,
                                                     const worker::v1::ModelDescription& model,
                                                     const RequestLimits& limits);

// Appends the images, sized for an output of width x height (image to image: resized to it), to
// item->images in order (qwen_edit: their condition images to item->condition_images, in the
// same order), and sets item->strength.
absl::Status AddInputImages(const DecodedInputImages& images, uint32_t height, uint32_t width,
                            worker::v1::RunItem* item);

// The public ImageInputs: the model's (from its description) with the server's limits filled in.
v1::ImageInputs PublicImageInputs(const v1::ImageInputs& model, const RequestLimits& limits);

}  // namespace ditserve::server
