#include "imaging/exif.h"

#include <cstdint>

namespace ditserve::imaging {

int ExifOrientation(absl::string_view exif) {
  if (exif.substr(0, 6) == absl::string_view("Exif\0\0", 6)) exif.remove_prefix(6);
  if (exif.size() < 8) return 1;
  bool little;
  if (exif.substr(0, 4) == absl::string_view("II*\0", 4)) {
    little = true;
  } else if (exif.substr(0, 4) == absl::string_view("MM\0*", 4)) {
    little = false;
  } else {
    return 1;
  }
  auto u8 = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(exif[i])); };
  auto u16 = [&](size_t i) -> uint32_t {
    return little ? (u8(i) | (u8(i + 1) << 8)) : ((u8(i) << 8) | u8(i + 1));
  };
  auto u32 = [&](size_t i) -> uint32_t {
    return little ? (u16(i) | (u16(i + 2) << 16)) : ((u16(i) << 16) | u16(i + 2));
  };
  const uint64_t ifd = u32(4);
  if (ifd + 2 > exif.size()) return 1;
  const uint32_t entries = u16(ifd);
  // Like Pillow: a later duplicate of the tag wins; a truncated directory keeps what was read.
  int orientation = 1;
  for (uint32_t e = 0; e < entries; ++e) {
    const uint64_t at = ifd + 2 + uint64_t{e} * 12;
    if (at + 12 > exif.size()) break;
    if (u16(at) != 0x0112) continue;
    const uint32_t type = u16(at + 2);
    uint32_t value = 0;  // anything but one integer: no orientation
    if (u32(at + 4) == 1) {
      switch (type) {
        case 1: value = u8(at + 8); break;           // BYTE
        case 3: case 8: value = u16(at + 8); break;  // SHORT, SSHORT
        case 4: case 9: value = u32(at + 8); break;  // LONG, SLONG
        default: break;
      }
    }
    orientation = (value >= 1 && value <= 8) ? static_cast<int>(value) : 1;
  }
  return orientation;
}

}  // namespace ditserve::imaging
