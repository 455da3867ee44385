#include "imaging/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "imaging/resample.h"
#include "imaging/transform.h"

namespace ditserve::imaging {
namespace {

// diffusers/pipelines/flux/pipeline_flux_kontext.py PREFERRED_KONTEXT_RESOLUTIONS, as (w, h).
constexpr int kKontextResolutions[][2] = {
    {672, 1568}, {688, 1504}, {720, 1456},  {752, 1392}, {800, 1328}, {832, 1248},
    {880, 1184}, {944, 1104}, {1024, 1024}, {1104, 944}, {1184, 880}, {1248, 832},
    {1328, 800}, {1392, 752}, {1456, 720},  {1504, 688}, {1568, 672}};

absl::Status CheckMultiple(int multiple_of) {
  if (multiple_of < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the size multiple must be at least 1, got ", multiple_of));
  }
  return absl::OkStatus();
}

// `value` // multiple * multiple, refusing 0.
absl::StatusOr<int> FloorToMultiple(int value, int multiple_of, absl::string_view what) {
  const int floored = value / multiple_of * multiple_of;
  if (floored < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", value, " pixels, below the size multiple ", multiple_of));
  }
  return floored;
}

// Flux2ImageProcessor._resize_to_target_area's size when the area exceeds max_area, else the size.
ImageSize AreaLimitedSize(int width, int height, int64_t max_area) {
  const int64_t area = int64_t{width} * height;
  if (max_area <= 0 || area <= max_area) return {width, height};
  // scale = math.sqrt(target_area / (image_width * image_height)); both ints are exact doubles and
  // Python's int / int is the correctly rounded quotient, like this division.
  const double scale = std::sqrt(static_cast<double>(max_area) / static_cast<double>(area));
  // int(image_width * scale): truncation toward zero of the double product.
  return {static_cast<int>(width * scale), static_cast<int>(height * scale)};
}

}  // namespace

absl::Status CheckImageShape(int width, int height, int64_t min_side, int64_t max_aspect_ratio) {
  if (width < 1 || height < 1) {
    return absl::InvalidArgumentError(absl::StrCat("is ", width, "x", height, ", an empty image"));
  }
  if (min_side > 0 && (width < min_side || height < min_side)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "is ", width, "x", height, "; each side must be at least ", min_side, " pixels"));
  }
  if (max_aspect_ratio > 0) {
    const double w = width;
    const double h = height;
    const double aspect = std::max(w / h, h / w);
    if (aspect > static_cast<double>(max_aspect_ratio)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("is %dx%d, an aspect ratio of %.1f:1; the limit is %d:1", width, height,
                          aspect, max_aspect_ratio));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ImageSize> ReferencePreparedSize(int width, int height, int64_t max_area,
                                                int multiple_of) {
  if (absl::Status s = CheckMultiple(multiple_of); !s.ok()) return s;
  const ImageSize resized = AreaLimitedSize(width, height, max_area);
  ImageSize out;
  auto w = FloorToMultiple(resized.width, multiple_of, "the prepared width");
  if (!w.ok()) return w.status();
  auto h = FloorToMultiple(resized.height, multiple_of, "the prepared height");
  if (!h.ok()) return h.status();
  out.width = *w;
  out.height = *h;
  return out;
}

absl::StatusOr<RgbImage> PrepareReferenceImage(const RgbImage& image, int64_t max_area,
                                               int multiple_of) {
  auto size = ReferencePreparedSize(image.width, image.height, max_area, multiple_of);
  if (!size.ok()) return size.status();
  const ImageSize resized = AreaLimitedSize(image.width, image.height, max_area);
  if (resized.width == image.width && resized.height == image.height) {
    return CenterCrop(image, size->width, size->height);
  }
  auto scaled = Resize(image, resized.width, resized.height, ResampleFilter::kLanczos);
  if (!scaled.ok()) return scaled.status();
  return CenterCrop(*scaled, size->width, size->height);
}

absl::StatusOr<RgbImage> PrepareImageToImage(const RgbImage& image, int width, int height,
                                             int multiple_of) {
  if (absl::Status s = CheckMultiple(multiple_of); !s.ok()) return s;
  auto w = FloorToMultiple(width, multiple_of, "the output width");
  if (!w.ok()) return w.status();
  auto h = FloorToMultiple(height, multiple_of, "the output height");
  if (!h.ok()) return h.status();
  return Resize(image, *w, *h, ResampleFilter::kLanczos);
}

absl::StatusOr<ImageSize> KontextPreparedSize(int width, int height, int multiple_of) {
  if (absl::Status s = CheckMultiple(multiple_of); !s.ok()) return s;
  // image_processor.get_default_height_width(img): each side floored to the multiple.
  auto w = FloorToMultiple(width, multiple_of, "the width");
  if (!w.ok()) return w.status();
  auto h = FloorToMultiple(height, multiple_of, "the height");
  if (!h.ok()) return h.status();
  const double aspect = static_cast<double>(*w) / static_cast<double>(*h);
  // min((abs(aspect_ratio - w / h), w, h) for w, h in PREFERRED_KONTEXT_RESOLUTIONS)
  std::tuple<double, int, int> best{0, 0, 0};
  bool first = true;
  for (const auto& r : kKontextResolutions) {
    const std::tuple<double, int, int> t{
        std::fabs(aspect - static_cast<double>(r[0]) / static_cast<double>(r[1])), r[0], r[1]};
    if (first || t < best) best = t;
    first = false;
  }
  ImageSize out;
  auto fw = FloorToMultiple(std::get<1>(best), multiple_of, "the Kontext width");
  if (!fw.ok()) return fw.status();
  auto fh = FloorToMultiple(std::get<2>(best), multiple_of, "the Kontext height");
  if (!fh.ok()) return fh.status();
  out.width = *fw;
  out.height = *fh;
  return out;
}

absl::StatusOr<RgbImage> PrepareKontextImage(const RgbImage& image, int multiple_of) {
  auto size = KontextPreparedSize(image.width, image.height, multiple_of);
  if (!size.ok()) return size.status();
  return Resize(image, size->width, size->height, ResampleFilter::kLanczos);
}

}  // namespace ditserve::imaging
