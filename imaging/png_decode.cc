// PNG through Debian's libpng, with no libpng transformations except unpacking 1/2/4-bit samples
// to a byte each and de-interlacing; the conversion to RGB is Pillow's (decode.h).
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/decoders.h"

namespace ditserve::imaging::internal {
namespace {

// Plain data shared with libpng's callbacks (no destructors: it lives across longjmps).
struct PngState {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void OnError(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof(state->message), "%s", message);
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}

void ReadFromMemory(png_structp png, png_bytep out, png_size_t length) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (length > state->size - state->pos) png_error(png, "file is truncated");
  std::memcpy(out, state->data + state->pos, length);
  state->pos += length;
}

struct PngInfo {
  png_uint_32 width;
  png_uint_32 height;
  int bit_depth;
  int color_type;
  size_t rowbytes;
};

// The libpng calls that may longjmp live in these frames, which hold only trivially destructible
// values, so a jump skips no destructor.
bool ReadInfo(png_structp png, png_infop info, uint32_t max_width, uint32_t max_height,
              PngInfo* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, max_width, max_height);
  png_read_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->bit_depth = png_get_bit_depth(png, info);
  out->color_type = png_get_color_type(png, info);
  if (out->bit_depth < 8) png_set_packing(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->rowbytes = png_get_rowbytes(png, info);
  return true;
}

bool ReadRows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

bool ReadEnd(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_end(png, info);
  return true;
}

// Pillow's 256-entry palette: the grey ramp, overwritten by the PLTE entries.
void Palette(png_structp png, png_infop info, uint8_t table[256][3]) {
  for (int i = 0; i < 256; ++i) table[i][0] = table[i][1] = table[i][2] = static_cast<uint8_t>(i);
  png_colorp colors = nullptr;
  int count = 0;
  if (png_get_PLTE(png, info, &colors, &count) != 0 && colors != nullptr) {
    for (int i = 0; i < count && i < 256; ++i) {
      table[i][0] = colors[i].red;
      table[i][1] = colors[i].green;
      table[i][2] = colors[i].blue;
    }
  }
}

void ConvertRow(const PngInfo& pi, const uint8_t palette[256][3], const uint8_t* in,
                uint8_t* out) {
  const bool wide = pi.bit_depth == 16;
  for (png_uint_32 x = 0; x < pi.width; ++x) {
    uint8_t* px = out + static_cast<size_t>(x) * 3;
    switch (pi.color_type) {
      case PNG_COLOR_TYPE_GRAY: {
        uint8_t v;
        if (wide) {
          // Pillow: mode "I", convert("RGB") clips the value to 0..255.
          const uint32_t s = (uint32_t{in[x * 2]} << 8) | in[x * 2 + 1];
          v = s >= 255 ? 255 : static_cast<uint8_t>(s);
        } else {
          const uint8_t s = in[x];
          switch (pi.bit_depth) {
            case 1: v = s ? 255 : 0; break;
            case 2: v = static_cast<uint8_t>(s * 0x55); break;
            case 4: v = static_cast<uint8_t>(s * 0x11); break;
            default: v = s; break;
          }
        }
        px[0] = px[1] = px[2] = v;
        break;
      }
      case PNG_COLOR_TYPE_GRAY_ALPHA: {
        const uint8_t v = wide ? in[x * 4] : in[x * 2];
        px[0] = px[1] = px[2] = v;
        break;
      }
      case PNG_COLOR_TYPE_PALETTE:
        std::memcpy(px, palette[in[x]], 3);
        break;
      case PNG_COLOR_TYPE_RGB:
      case PNG_COLOR_TYPE_RGB_ALPHA: {
        const size_t channels = pi.color_type == PNG_COLOR_TYPE_RGB ? 3 : 4;
        const size_t step = wide ? 2 : 1;  // high byte of a 16-bit sample
        const uint8_t* s = in + x * channels * step;
        px[0] = s[0];
        px[1] = s[step];
        px[2] = s[2 * step];
        break;
      }
    }
  }
}

absl::StatusOr<RawDecode> Decode(png_structp png, png_infop info, PngState* state,
                                 const DecodeLimits& limits) {
  PngInfo pi{};
  if (!ReadInfo(png, info, limits.max_width, limits.max_height, &pi)) {
    return absl::InvalidArgumentError(absl::StrCat("PNG: ", state->message));
  }
  RETURN_IF_ERROR(CheckLimits(pi.width, pi.height, limits, ImageFormat::kPng));
  const size_t channels = pi.color_type == PNG_COLOR_TYPE_GRAY         ? 1
                          : pi.color_type == PNG_COLOR_TYPE_PALETTE    ? 1
                          : pi.color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                          : pi.color_type == PNG_COLOR_TYPE_RGB        ? 3
                                                                       : 4;
  const size_t expected = pi.width * channels * (pi.bit_depth == 16 ? 2 : 1);
  if (pi.rowbytes != expected) {
    return absl::InvalidArgumentError("PNG: unexpected row layout");
  }
  std::vector<uint8_t> raw(pi.rowbytes * pi.height);
  std::vector<png_bytep> rows(pi.height);
  for (png_uint_32 y = 0; y < pi.height; ++y) rows[y] = raw.data() + pi.rowbytes * y;
  if (!ReadRows(png, rows.data())) {
    return absl::InvalidArgumentError(absl::StrCat("PNG: ", state->message));
  }
  // Pillow reads the chunks after the image data leniently (a missing IEND is fine); so do we,
  // for an eXIf chunk placed there.
  ReadEnd(png, info);
  uint8_t palette[256][3];
  Palette(png, info, palette);
  RawDecode out;
  out.image = MakeRgbImage(static_cast<int>(pi.width), static_cast<int>(pi.height));
  for (png_uint_32 y = 0; y < pi.height; ++y) {
    ConvertRow(pi, palette, rows[y], &out.image.pixels[out.image.Offset(0, static_cast<int>(y))]);
  }
  png_uint_32 exif_size = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(png, info, &exif_size, &exif) != 0 && exif != nullptr) {
    out.exif.assign(reinterpret_cast<const char*>(exif), exif_size);
  }
  return out;
}

}  // namespace

absl::StatusOr<RawDecode> DecodePng(absl::string_view bytes, const DecodeLimits& limits) {
  PngState state{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, OnError, OnWarning);
  if (png == nullptr) return absl::InternalError("PNG: png_create_read_struct failed");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::InternalError("PNG: png_create_info_struct failed");
  }
  png_set_read_fn(png, &state, ReadFromMemory);
  absl::StatusOr<RawDecode> result = Decode(png, info, &state, limits);
  png_destroy_read_struct(&png, &info, nullptr);
  return result;
}

}  // namespace ditserve::imaging::internal
