// libFuzzer target: DecodeImage (imaging/decode.h: format sniffing, the header limits, libpng /
// libjpeg-turbo / libwebp behind setjmp-safe frames, Pillow's RGB conversion, EXIF orientation)
// must return a Status for any input, never crash, leak, read out of bounds or hit undefined
// behaviour (built with -fsanitize=fuzzer,address,undefined). A decoded image then goes through
// Resize, whose invariants are checked too. Seeds: tests/fuzz/seeds/image_decode/ (small valid
// PNG / JPEG / WebP files in each layout the decoders handle).
#include <cstddef>
#include <cstdint>
#include <string>

#include "imaging/decode.h"
#include "imaging/exif.h"
#include "imaging/format.h"
#include "imaging/resample.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ditserve::imaging;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Small limits keep each run fast and inside libFuzzer's memory limit; a header over them must
  // be refused before decoding.
  DecodeOptions options;
  options.limits = {1024, 1024, uint64_t{512} * 512};
  options.apply_exif_orientation = size % 2 == 0;
  auto header = ReadImageHeader(bytes);
  auto decoded = DecodeImage(bytes, options);
  if (!decoded.ok()) {
    Check(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Check(header.ok());
  const RgbImage& image = decoded->image;
  Check(image.width > 0 && image.height > 0);
  Check(image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3);
  Check(static_cast<uint64_t>(image.width) * image.height <= options.limits.max_pixels);
  const bool swapped = options.apply_exif_orientation && decoded->exif_orientation >= 5;
  Check(static_cast<uint32_t>(swapped ? image.height : image.width) == header->width);
  Check(static_cast<uint32_t>(swapped ? image.width : image.height) == header->height);
  Check(decoded->exif_orientation >= 1 && decoded->exif_orientation <= 8);
  // Resize with a filter and size taken from the input's last bytes.
  const uint8_t a = size > 0 ? data[size - 1] : 0;
  const uint8_t b = size > 1 ? data[size - 2] : 0;
  const ResampleFilter filters[] = {ResampleFilter::kNearest, ResampleFilter::kBox,
                                    ResampleFilter::kBilinear, ResampleFilter::kHamming,
                                    ResampleFilter::kBicubic, ResampleFilter::kLanczos};
  const int width = 1 + a % 97;
  const int height = 1 + b % 89;
  auto resized = Resize(image, width, height, filters[(a ^ b) % 6]);
  Check(resized.ok());
  Check(resized->width == width && resized->height == height);
  Check(resized->pixels.size() == static_cast<size_t>(width) * height * 3);
  return 0;
}
