// The EXIF Orientation tag (0x0112) of IFD0, read the way Pillow's Exif.load + getexif do for
// ImageOps.exif_transpose. Pure function, thread-safe.
#pragma once

#include "absl/strings/string_view.h"

namespace ditserve::imaging {

// `exif`: a TIFF block ("II*\0" or "MM\0*" header), optionally prefixed by "Exif\0\0" (JPEG APP1,
// PNG eXIf as Pillow stores it). The orientation value when IFD0 holds the tag with one value of
// an integer type; 1 (no change) when the block is empty, malformed or has no such tag; Pillow
// ignores malformed EXIF the same way except a block without a TIFF header, on which
// exif_transpose raises (we treat it as absent).
int ExifOrientation(absl::string_view exif);

}  // namespace ditserve::imaging
