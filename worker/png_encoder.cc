#include "worker/png_encoder.h"

#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

namespace ditserve::worker {
namespace {

constexpr int kChannels = 3;
constexpr uint32_t kRowsPerStrip = 128;  // the strips' height (the last may be shorter)
constexpr uint32_t kMaxStrips = 8;       // at most this many strips, and threads
constexpr size_t kWindow = 32768;        // deflate's window: the dictionary a strip starts with
constexpr size_t kIdatBytes = 1 << 20;   // IDAT chunks of at most 1 MiB

// PNG's five row filters (spec §9), the one chosen per row by libpng's own heuristic: the least sum
// of the filtered bytes read as signed magnitudes. `row` and `prev` (the row above; zeros for the
// first) are the raw bytes; writes the filter type then the filtered row to `out` (1 + n bytes);
// `scratch` holds n bytes.
void FilterRow(const uint8_t* row, const uint8_t* prev, size_t n, uint8_t* out, uint8_t* scratch) {
  constexpr size_t bpp = kChannels;
  auto cost = [n](const uint8_t* f) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; ++i) sum += f[i] < 128 ? f[i] : 256 - f[i];
    return sum;
  };
  auto paeth = [](int a, int b, int c) {
    const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
  };
  uint8_t* best = out + 1;
  std::memcpy(best, row, n);  // None
  uint64_t best_cost = cost(best);
  int best_type = 0;
  for (int type = 1; type < 5; ++type) {
    uint8_t* f = scratch;
    const size_t head = std::min(bpp, n);
    switch (type) {
      case 1:  // Sub
        for (size_t i = 0; i < head; ++i) f[i] = row[i];
        for (size_t i = bpp; i < n; ++i) f[i] = static_cast<uint8_t>(row[i] - row[i - bpp]);
        break;
      case 2:  // Up
        for (size_t i = 0; i < n; ++i) f[i] = static_cast<uint8_t>(row[i] - prev[i]);
        break;
      case 3:  // Average
        for (size_t i = 0; i < head; ++i) f[i] = static_cast<uint8_t>(row[i] - prev[i] / 2);
        for (size_t i = bpp; i < n; ++i) {
          f[i] = static_cast<uint8_t>(row[i] - (row[i - bpp] + prev[i]) / 2);
        }
        break;
      default:  // Paeth
        for (size_t i = 0; i < head; ++i) f[i] = static_cast<uint8_t>(row[i] - prev[i]);
        for (size_t i = bpp; i < n; ++i) {
          f[i] = static_cast<uint8_t>(row[i] - paeth(row[i - bpp], prev[i], prev[i - bpp]));
        }
        break;
    }
    const uint64_t c = cost(f);
    if (c < best_cost) {
      std::memcpy(best, f, n);
      best_cost = c;
      best_type = type;
    }
  }
  out[0] = static_cast<uint8_t>(best_type);
}

// One strip of rows: filtered, then deflated as raw deflate data that continues the strips before
// it (their last 32 KiB as its dictionary; a byte-aligned sync flush at its end, the last strip's
// end the stream's final block). Its output concatenated after theirs is one deflate stream.
struct Strip {
  uint32_t first_row = 0, rows = 0;
  bool last = false;
  std::string filtered, deflated;
  uLong adler = 1;
  bool ok = false;
};

void FilterStrip(const uint8_t* rgb, uint32_t width, Strip* s) {
  const size_t n = static_cast<size_t>(width) * kChannels;
  s->filtered.resize((n + 1) * s->rows);
  std::string zeros(n, '\0'), scratch(n, '\0');
  for (uint32_t r = 0; r < s->rows; ++r) {
    const uint32_t y = s->first_row + r;
    const uint8_t* row = rgb + y * n;
    const uint8_t* prev =
        y == 0 ? reinterpret_cast<const uint8_t*>(zeros.data()) : rgb + (y - 1) * n;
    FilterRow(row, prev, n, reinterpret_cast<uint8_t*>(&s->filtered[r * (n + 1)]),
              reinterpret_cast<uint8_t*>(scratch.data()));
  }
  s->adler = adler32(1, reinterpret_cast<const Bytef*>(s->filtered.data()),
                     static_cast<uInt>(s->filtered.size()));
}

void DeflateStrip(const std::string* dictionary, int level, int strategy, Strip* s) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, -15, 8, strategy) != Z_OK) return;
  bool ok = true;
  if (dictionary != nullptr && !dictionary->empty()) {
    const size_t take = std::min(dictionary->size(), kWindow);
    ok = deflateSetDictionary(
             &z, reinterpret_cast<const Bytef*>(dictionary->data() + dictionary->size() - take),
             static_cast<uInt>(take)) == Z_OK;
  }
  s->deflated.resize(deflateBound(&z, s->filtered.size()) + 16);
  z.next_in = reinterpret_cast<Bytef*>(s->filtered.data());
  z.avail_in = static_cast<uInt>(s->filtered.size());
  z.next_out = reinterpret_cast<Bytef*>(s->deflated.data());
  z.avail_out = static_cast<uInt>(s->deflated.size());
  const int rc = ok ? deflate(&z, s->last ? Z_FINISH : Z_SYNC_FLUSH) : Z_STREAM_ERROR;
  ok = ok && z.avail_in == 0 && z.avail_out > 0 && (s->last ? rc == Z_STREAM_END : rc == Z_OK);
  s->deflated.resize(z.total_out);
  deflateEnd(&z);
  s->ok = ok;
}

// The zlib stream (RFC 1950) of the whole image's filtered rows: header, the strips' deflate data
// in order, the Adler-32 of all of it. Filtering and deflating run one thread a strip.
bool CompressImage(const uint8_t* rgb, uint32_t height, uint32_t width,
                   const PngCompression& compression, std::string* zlib) {
  const uint32_t strips_n =
      std::min<uint32_t>(kMaxStrips, (height + kRowsPerStrip - 1) / kRowsPerStrip);
  std::vector<Strip> strips(std::max<uint32_t>(1, strips_n));
  const uint32_t per = (height + strips.size() - 1) / strips.size();
  for (size_t i = 0; i < strips.size(); ++i) {
    strips[i].first_row = static_cast<uint32_t>(i) * per;
    strips[i].rows = std::min(per, height - strips[i].first_row);
    strips[i].last = i + 1 == strips.size();
  }
  const int level = compression.level >= 0 ? compression.level : Z_DEFAULT_COMPRESSION;
  // -1: libpng's own default for filtered rows.
  const int strategy = compression.strategy >= 0 ? compression.strategy : Z_FILTERED;
  // Filter every strip first (a strip's dictionary is the filtered strip before it), then deflate.
  // Strip 0 on this thread, each other on its own (inline where no thread can be had).
  auto in_parallel = [&](auto&& work) {
    std::vector<std::thread> threads;
    size_t next = 1;
    for (; next < strips.size(); ++next) {
      try {
        threads.emplace_back(work, next);
      } catch (const std::system_error&) {
        break;
      }
    }
    for (size_t i = next; i < strips.size(); ++i) work(i);
    work(0);
    for (std::thread& t : threads) t.join();
  };
  in_parallel([&](size_t i) { FilterStrip(rgb, width, &strips[i]); });
  in_parallel([&](size_t i) {
    DeflateStrip(i == 0 ? nullptr : &strips[i - 1].filtered, level, strategy, &strips[i]);
  });
  // RFC 1950 header: deflate, 32 KiB window; FLEVEL from the level; FCHECK makes it a multiple
  // of 31.
  const int flevel = level == Z_DEFAULT_COMPRESSION || level == 6 ? 2
                     : level < 2                                  ? 0
                     : level < 6                                  ? 1
                                                                  : 3;
  const unsigned cmf = 0x78, flg0 = static_cast<unsigned>(flevel) << 6;
  const unsigned flg = flg0 + (31 - (cmf * 256 + flg0) % 31) % 31;
  zlib->clear();
  zlib->push_back(static_cast<char>(cmf));
  zlib->push_back(static_cast<char>(flg));
  uLong adler = 1;
  for (const Strip& s : strips) {
    if (!s.ok) return false;
    zlib->append(s.deflated);
    adler = adler32_combine(adler, s.adler, static_cast<z_off_t>(s.filtered.size()));
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    zlib->push_back(static_cast<char>((adler >> shift) & 0xFF));
  }
  return true;
}

void WriteToString(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), length);
}

void NoFlush(png_structp) {}

// The libpng calls, which report errors by longjmp: this frame holds only trivially destructible
// values, so the jump skips no destructor (and -Wclobbered has nothing to warn about). libpng
// writes the signature, IHDR, the tEXt chunks and every chunk's CRC; the image data is the
// already compressed zlib stream, in IDAT chunks, then IEND.
bool WritePng(png_structp png, png_infop info, const std::string* zlib, uint32_t height,
              uint32_t width, png_text* chunks, int num_chunks, std::string* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, WriteToString, NoFlush);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (num_chunks > 0) png_set_text(png, info, chunks, num_chunks);
  png_write_info(png, info);
  const auto* data = reinterpret_cast<png_const_bytep>(zlib->data());
  for (size_t at = 0; at < zlib->size(); at += kIdatBytes) {
    png_write_chunk(png, reinterpret_cast<png_const_bytep>("IDAT"), data + at,
                    std::min(kIdatBytes, zlib->size() - at));
  }
  png_write_chunk(png, reinterpret_cast<png_const_bytep>("IEND"), nullptr, 0);
  return true;
}

}  // namespace

static_assert(PngCompression{}.strategy == Z_RLE, "png_encoder.h's default strategy is Z_RLE");

absl::StatusOr<std::string> EncodePng(const uint8_t* rgb, uint32_t height, uint32_t width,
                                      const std::vector<std::pair<std::string, std::string>>& text,
                                      const PngCompression& compression) {
  if (height == 0 || width == 0) return absl::InvalidArgumentError("PNG: empty image");
  std::string zlib;
  if (!CompressImage(rgb, height, width, compression, &zlib)) {
    return absl::InternalError("PNG: zlib failed while compressing the image data");
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (png == nullptr) return absl::InternalError("PNG: png_create_write_struct failed");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return absl::InternalError("PNG: png_create_info_struct failed");
  }
  std::string out;
  std::vector<png_text> chunks(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    chunks[i].compression = PNG_TEXT_COMPRESSION_NONE;
    chunks[i].key = const_cast<char*>(text[i].first.c_str());
    chunks[i].text = const_cast<char*>(text[i].second.c_str());
    chunks[i].text_length = text[i].second.size();
  }
  const bool ok = WritePng(png, info, &zlib, height, width, chunks.data(),
                           static_cast<int>(chunks.size()), &out);
  png_destroy_write_struct(&png, &info);
  if (!ok) return absl::InternalError("PNG: libpng failed while writing");
  return out;
}

}  // namespace ditserve::worker
