#include "worker/jpeg_encoder.h"

#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ditserve::worker {
namespace {

// JPEG's largest side (the SOF fields are 16-bit).
constexpr uint32_t kMaxJpegSide = 65500;
// A COM marker holds at most this many bytes.
constexpr size_t kMaxComment = 65533;

// Plain data shared with libjpeg's error callback (no destructors: it lives across longjmps).
struct JpegError {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// The libjpeg calls, which report errors by longjmp: this frame holds only trivially destructible
// values, so the jump skips no destructor. `*out` / `*size` are libjpeg's malloc'ed buffer (the
// caller frees it, also after a failure).
bool WriteJpeg(jpeg_compress_struct* cinfo, JpegError* err, const uint8_t* rgb, uint32_t height,
               uint32_t width, int quality, const char* comment, size_t comment_size,
               unsigned char** out, unsigned long* size) {
  if (setjmp(err->jump)) return false;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, out, size);
  cinfo->image_width = width;
  cinfo->image_height = height;
  cinfo->input_components = 3;
  cinfo->in_color_space = JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  cinfo->optimize_coding = TRUE;
  jpeg_start_compress(cinfo, TRUE);
  if (comment_size > 0) {
    jpeg_write_marker(cinfo, JPEG_COM, reinterpret_cast<const JOCTET*>(comment),
                      static_cast<unsigned int>(comment_size));
  }
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(rgb + static_cast<size_t>(cinfo->next_scanline) * width * 3);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

absl::StatusOr<std::string> EncodeJpeg(
    const uint8_t* rgb, uint32_t height, uint32_t width, uint32_t quality,
    const std::vector<std::pair<std::string, std::string>>& text) {
  if (height == 0 || width == 0) return absl::InvalidArgumentError("JPEG: empty image");
  if (height > kMaxJpegSide || width > kMaxJpegSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG: ", width, "x", height, " is over JPEG's largest side ", kMaxJpegSide));
  }
  std::string comment;
  for (const auto& [key, value] : text) absl::StrAppend(&comment, key, ": ", value, "\n");
  if (comment.size() > kMaxComment) comment.resize(kMaxComment);

  jpeg_compress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnErrorExit;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): libjpeg's type
  const bool ok = WriteJpeg(&cinfo, &err, rgb, height, width,
                            static_cast<int>(std::min<uint32_t>(quality, 100)), comment.data(),
                            comment.size(), &buffer, &size);
  jpeg_destroy_compress(&cinfo);
  std::string out;
  if (ok) out.assign(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  if (!ok) return absl::InternalError(absl::StrCat("JPEG: libjpeg failed: ", err.message));
  return out;
}

}  // namespace ditserve::worker
