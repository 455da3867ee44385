#include "server/input_images.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/decode.h"
#include "imaging/format.h"
#include "imaging/preprocess.h"
#include "imaging/qwen_edit_sizes.h"

namespace ditserve::server {
namespace {

// diffusers' FluxImg2ImgPipeline default, for a model that describes none.
constexpr double kFallbackStrength = 0.6;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

// "images[i]: <why>" for a message of the imaging library.
absl::Status ImageError(int i, const absl::Status& s) {
  return Invalid(absl::StrCat("images[", i, "]: ", s.message()));
}

absl::StatusOr<ImageInputUse> ParseUse(const v1::ImageInputs& spec) {
  if (spec.max_images() == 0) return ImageInputUse::kNone;
  const std::string& use = spec.use();
  if (use == "reference") return ImageInputUse::kReference;
  if (use == "image_to_image") return ImageInputUse::kImageToImage;
  if (use == "kontext") return ImageInputUse::kKontext;
  if (use == "qwen_edit") return ImageInputUse::kQwenEdit;
  return absl::InternalError(absl::StrCat("the workers describe an unknown image input use '", use,
                                          "' (this frontend knows reference, image_to_image, "
                                          "kontext, qwen_edit)"));
}

absl::Status CheckCount(const v1::GenerateRequest& r, const worker::v1::ModelDescription& model) {
  const uint32_t max = model.inputs().image_inputs().max_images();
  const int n = r.images_size();
  if (n > 0 && max == 0) {
    return Invalid(absl::StrCat("images: ", model.name().empty() ? "this model" : model.name(),
                                " takes no input image"));
  }
  if (static_cast<uint32_t>(n) > max) {
    return Invalid(absl::StrCat("images: this model takes at most ", max, " input image",
                                max == 1 ? "" : "s", ", got ", n));
  }
  const uint32_t min = model.inputs().image_inputs().min_images();
  if (max > 0 && static_cast<uint32_t>(n) < min) {
    return Invalid(absl::StrCat("images: this model needs at least ", min, " input image",
                                min == 1 ? "" : "s", ", got ", n));
  }
  return absl::OkStatus();
}

// The request's strength, defaulted (0 when the model or the request has no image to noise).
absl::StatusOr<double> ResolveStrength(const v1::GenerateRequest& r, const v1::ImageInputs& spec,
                                      ImageInputUse use) {
  const double s = r.strength();
  if (!(s >= 0.0 && s <= 1.0)) {  // NaN fails both
    return Invalid(absl::StrCat("strength must be in (0, 1] (0: the model's default), got ", s));
  }
  if (s != 0.0 && use != ImageInputUse::kImageToImage) {
    return Invalid(absl::StrCat(
        "strength is only for models whose image input use is image_to_image (this model: ",
        spec.use().empty() ? "no input images" : spec.use(), ")"));
  }
  if (use != ImageInputUse::kImageToImage) return 0.0;
  if (r.images_size() == 0) {
    if (s != 0.0) return Invalid("strength needs an input image (images is empty)");
    return 0.0;
  }
  if (s != 0.0) return s;
  const double d = spec.default_strength();
  return d > 0.0 && d <= 1.0 ? d : kFallbackStrength;
}

// Size limits from the header, before any decoder runs; then the decode.
absl::StatusOr<imaging::RgbImage> DecodeOne(int i, const std::string& bytes,
                                            const RequestLimits& limits) {
  if (bytes.empty()) return Invalid(absl::StrCat("images[", i, "] is empty"));
  if (bytes.size() > limits.max_input_image_bytes) {
    return Invalid(absl::StrCat("images[", i, "] is ", bytes.size(), " bytes; the limit is ",
                                limits.max_input_image_bytes, " bytes (max_image_bytes)"));
  }
  absl::StatusOr<imaging::ImageHeader> header = imaging::ReadImageHeader(bytes);
  if (!header.ok()) return ImageError(i, header.status());
  const uint64_t pixels = uint64_t{header->width} * header->height;
  if (header->width > limits.max_input_image_side || header->height > limits.max_input_image_side ||
      pixels > limits.max_input_image_pixels) {
    return Invalid(absl::StrCat("images[", i, "]: the ", imaging::ImageFormatName(header->format),
                                " header says ", header->width, "x", header->height,
                                " pixels; the limit is ", limits.max_input_image_side,
                                " pixels a side (max_image_side) and ",
                                limits.max_input_image_pixels, " pixels (max_image_pixels)"));
  }
  imaging::DecodeOptions options;
  options.limits.max_width = static_cast<uint32_t>(limits.max_input_image_side);
  options.limits.max_height = static_cast<uint32_t>(limits.max_input_image_side);
  options.limits.max_pixels = limits.max_input_image_pixels;
  absl::StatusOr<imaging::DecodedImage> decoded = imaging::DecodeImage(bytes, options);
  if (!decoded.ok()) return ImageError(i, decoded.status());
  return std::move(decoded->image);
}

void SetPixels(const imaging::RgbImage& image, worker::v1::RgbPixels* out) {
  out->set_width(static_cast<uint32_t>(image.width));
  out->set_height(static_cast<uint32_t>(image.height));
  out->set_rgb(image.pixels.data(), image.pixels.size());
}

}  // namespace

absl::StatusOr<DecodedInputImages> DecodeInputImages(const v1::GenerateRequest& r,
                                                     const worker::v1::ModelDescription& model,
                                                     const RequestLimits& limits) {
  const v1::ImageInputs& spec = model.inputs().image_inputs();
  RETURN_IF_ERROR(CheckCount(r, model));
  DecodedInputImages out;
  ASSIGN_OR_RETURN(out.use, ParseUse(spec));
  ASSIGN_OR_RETURN(out.strength, ResolveStrength(r, spec, out.use));
  out.size_multiple = spec.size_multiple() > 0 ? static_cast<int>(spec.size_multiple()) : 16;
  out.floor_requested_size = out.use == ImageInputUse::kQwenEdit;
  if (r.images_size() == 0) return out;
  out.images.reserve(static_cast<size_t>(r.images_size()));
  imaging::ImageSize last;  // the last image's decoded size
  for (int i = 0; i < r.images_size(); ++i) {
    ASSIGN_OR_RETURN(imaging::RgbImage image, DecodeOne(i, r.images(i), limits));
    if (absl::Status s = imaging::CheckImageShape(image.width, image.height, spec.min_side(),
                                                  spec.max_aspect_ratio());
        !s.ok()) {
      return Invalid(absl::StrCat("images[", i, "] ", s.message()));
    }
    last = {image.width, image.height};
    absl::StatusOr<imaging::RgbImage> prepared;
    switch (out.use) {
      case ImageInputUse::kReference:
        prepared = imaging::PrepareReferenceImage(image, static_cast<int64_t>(spec.max_area()),
                                                  out.size_multiple);
        break;
      case ImageInputUse::kKontext:
        prepared = imaging::PrepareKontextImage(image, out.size_multiple);
        break;
      case ImageInputUse::kQwenEdit: {
        // The size rules' messages start with "is WxH" (qwen_edit_sizes.h).
        const int64_t area = spec.condition_area() > 0 ? static_cast<int64_t>(spec.condition_area())
                                                       : imaging::kQwenEditConditionArea;
        absl::StatusOr<imaging::RgbImage> condition =
            imaging::PrepareQwenEditConditionImage(image, area);
        if (!condition.ok()) {
          return Invalid(absl::StrCat("images[", i, "] ", condition.status().message()));
        }
        out.condition_images.push_back(*std::move(condition));
        prepared = imaging::PrepareQwenEditVaeImage(image, out.size_multiple);
        if (!prepared.ok()) {
          return Invalid(absl::StrCat("images[", i, "] ", prepared.status().message()));
        }
        break;
      }
      default:
        prepared = std::move(image);  // sized to the output by AddInputImages
        break;
    }
    if (!prepared.ok()) return ImageError(i, prepared.status());
    out.images.push_back(*std::move(prepared));
  }
  if (out.use == ImageInputUse::kReference) {
    out.default_width = static_cast<uint32_t>(out.images.front().width);
    out.default_height = static_cast<uint32_t>(out.images.front().height);
  }
  if (out.use == ImageInputUse::kQwenEdit) {
    // Both sides as calculated (a side the request gives replaces its own, floored alike, in
    // ValidateRequest: the same as QwenEditOutputSize with that side).
    absl::StatusOr<imaging::ImageSize> size =
        imaging::QwenEditOutputSize(last.width, last.height, 0, 0, out.size_multiple);
    if (!size.ok()) return ImageError(r.images_size() - 1, size.status());
    out.default_width = static_cast<uint32_t>(size->width);
    out.default_height = static_cast<uint32_t>(size->height);
  }
  return out;
}

absl::Status AddInputImages(const DecodedInputImages& images, uint32_t height, uint32_t width,
                            worker::v1::RunItem* item) {
  item->set_strength(images.strength);
  for (size_t i = 0; i < images.images.size(); ++i) {
    const imaging::RgbImage* image = &images.images[i];
    absl::StatusOr<imaging::RgbImage> resized;
    if (images.use == ImageInputUse::kImageToImage) {
      resized = imaging::PrepareImageToImage(*image, static_cast<int>(width),
                                             static_cast<int>(height), images.size_multiple);
      if (!resized.ok()) return ImageError(static_cast<int>(i), resized.status());
      image = &*resized;
    }
    SetPixels(*image, item->add_images());
  }
  for (const imaging::RgbImage& condition : images.condition_images) {
    SetPixels(condition, item->add_condition_images());
  }
  return absl::OkStatus();
}

v1::ImageInputs PublicImageInputs(const v1::ImageInputs& model, const RequestLimits& limits) {
  v1::ImageInputs out = model;
  out.set_max_image_bytes(limits.max_input_image_bytes);
  out.set_max_image_pixels(limits.max_input_image_pixels);
  out.set_max_image_side(static_cast<uint32_t>(limits.max_input_image_side));
  return out;
}

}  // namespace ditserve::server
