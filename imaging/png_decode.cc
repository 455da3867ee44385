// PNG through Debian's libpng, with no libpng transformations except unpacking 1/2/4-bit samples
// to a byte each and de-interlacing; the conversion to RGB is Pillow's (decode.h).
#include <png.h>

#include <array>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
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

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

// PNG's CRC-32 (ISO 3309) of the chunk type and data.
uint32_t Crc32(const uint8_t* data, size_t size) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = kCrcTable[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Pillow verifies the checksum of every chunk before the image data (and refuses the file on a
// mismatch) but never those of IDAT or what follows; libpng is told to ignore critical chunks'
// checksums (below) after this check, so both accept and refuse the same files.
absl::Status CheckChunksBeforeImageData(absl::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 8) return absl::InvalidArgumentError("PNG: file is truncated");
  size_t pos = 8;
  while (true) {
    if (bytes.size() - pos < 8) return absl::InvalidArgumentError("PNG: file is truncated");
    const uint32_t length = Be32(data + pos);
    const absl::string_view type = bytes.substr(pos + 4, 4);
    if (type == "IDAT") return absl::OkStatus();
    if (bytes.size() - pos < 12 || length > bytes.size() - pos - 12) {
      return absl::InvalidArgumentError("PNG: file is truncated");
    }
    if (Crc32(data + pos + 4, size_t{length} + 4) != Be32(data + pos + 8 + length)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PNG: bad checksum in chunk '", absl::CHexEscape(type), "'"));
    }
    if (type == "IEND") return absl::InvalidArgumentError("PNG: no image data");
    pos += size_t{length} + 12;
  }
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
  // Critical chunks' checksums: checked before IDAT by CheckChunksBeforeImageData, ignored after
  // (as Pillow); ancillary chunks after IDAT with a bad checksum are dropped (libpng's default).
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_DEFAULT);
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
  RETURN_IF_ERROR(CheckChunksBeforeImageData(bytes));
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
