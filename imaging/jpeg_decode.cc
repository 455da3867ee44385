// JPEG through Debian's libjpeg-turbo with Pillow's decoder settings (the library's defaults:
// islow IDCT, fancy upsampling; output RGB, grey or CMYK by component count); the CMYK to RGB
// conversion is Pillow's (decode.h).
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/decoders.h"

namespace ditserve::imaging::internal {
namespace {

constexpr int kMaxScans = 1000;

// Plain data shared with libjpeg's callbacks (no destructors: it lives across longjmps).
struct JpegError {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void OnErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are ignored as Pillow ignores them, except premature end of data: libjpeg would pad
// the image with grey where Pillow reports a truncated file.
void OnMessage(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
}

void OnProgress(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (dinfo->input_scan_number > kMaxScans) {
      auto* err = reinterpret_cast<JpegError*>(cinfo->err);
      std::snprintf(err->message, sizeof(err->message), "more than %d scans", kMaxScans);
      std::longjmp(err->jump, 1);
    }
  }
}

// The libjpeg calls that may longjmp live in these frames, which hold only trivially
// destructible values, so a jump skips no destructor.
bool ReadHeader(j_decompress_ptr cinfo, JpegError* err, jpeg_progress_mgr* progress,
                const uint8_t* data, size_t size) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  cinfo->progress = progress;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);
  switch (cinfo->num_components) {
    case 1: cinfo->out_color_space = JCS_GRAYSCALE; break;
    case 3: cinfo->out_color_space = JCS_RGB; break;
    case 4: cinfo->out_color_space = JCS_CMYK; break;
    default: break;  // refused by the caller
  }
  return true;
}

bool StartDecompress(j_decompress_ptr cinfo, JpegError* err) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);
  return true;
}

bool ReadPixels(j_decompress_ptr cinfo, JpegError* err, uint8_t* out, size_t row_bytes) {
  if (setjmp(err->jump)) return false;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + row_bytes * cinfo->output_scanline;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      std::snprintf(err->message, sizeof(err->message), "decoder suspended");
      return false;
    }
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

absl::StatusOr<RawDecode> Decode(j_decompress_ptr cinfo, JpegError* err,
                                 jpeg_progress_mgr* progress, absl::string_view bytes,
                                 const DecodeLimits& limits) {
  if (!ReadHeader(cinfo, err, progress, reinterpret_cast<const uint8_t*>(bytes.data()),
                  bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG: ", err->message));
  }
  const int components = cinfo->num_components;
  if (components != 1 && components != 3 && components != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG: cannot handle ", components, "-component images"));
  }
  if (cinfo->data_precision != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG: cannot handle ", cinfo->data_precision, "-bit samples"));
  }
  RETURN_IF_ERROR(CheckLimits(cinfo->image_width, cinfo->image_height, limits,
                              ImageFormat::kJpeg));
  RawDecode out;
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
    // Pillow keeps the first APP1 that starts with "Exif\0".
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 5 &&
        std::memcmp(m->data, "Exif\0", 5) == 0) {
      out.exif.assign(reinterpret_cast<const char*>(m->data), m->data_length);
      break;
    }
  }
  if (!StartDecompress(cinfo, err)) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG: ", err->message));
  }
  const uint32_t width = cinfo->output_width;
  const uint32_t height = cinfo->output_height;
  if (width != cinfo->image_width || height != cinfo->image_height ||
      cinfo->output_components != components) {
    return absl::InvalidArgumentError("JPEG: unexpected output layout");
  }
  const size_t row_bytes = static_cast<size_t>(width) * components;
  std::vector<uint8_t> raw(row_bytes * height);
  if (!ReadPixels(cinfo, err, raw.data(), row_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG: ", err->message));
  }
  if (err->truncated) {
    return absl::InvalidArgumentError("JPEG: image file is truncated (premature end of data)");
  }
  out.image = MakeRgbImage(static_cast<int>(width), static_cast<int>(height));
  uint8_t* px = out.image.pixels.data();
  const size_t pixels = static_cast<size_t>(width) * height;
  if (components == 3) {
    std::memcpy(px, raw.data(), pixels * 3);
  } else if (components == 1) {
    for (size_t i = 0; i < pixels; ++i) px[i * 3] = px[i * 3 + 1] = px[i * 3 + 2] = raw[i];
  } else {
    // Pillow: rawmode "CMYK;I" (inverted, Adobe's convention), then cmyk2rgb:
    // out = clip8(nk - nk * c / 255) with MULDIV255's rounding, nk = 255 - k.
    for (size_t i = 0; i < pixels; ++i) {
      const uint8_t* s = &raw[i * 4];
      const int nk = s[3];  // 255 - (255 - raw k)
      for (int c = 0; c < 3; ++c) {
        const int inv = 255 - s[c];
        int tmp = inv * nk + 128;
        tmp = ((tmp >> 8) + tmp) >> 8;
        const int v = nk - tmp;
        px[i * 3 + c] = static_cast<uint8_t>(v <= 0 ? 0 : v < 256 ? v : 255);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RawDecode> DecodeJpeg(absl::string_view bytes, const DecodeLimits& limits) {
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof(cinfo));
  JpegError err;
  std::memset(&err, 0, sizeof(err));
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnErrorExit;
  err.pub.emit_message = OnMessage;
  jpeg_progress_mgr progress;
  std::memset(&progress, 0, sizeof(progress));
  progress.progress_monitor = OnProgress;
  absl::StatusOr<RawDecode> result = Decode(&cinfo, &err, &progress, bytes, limits);
  jpeg_destroy_decompress(&cinfo);
  return result;
}

}  // namespace ditserve::imaging::internal
