// A small safetensors serializer for the CLI's raw and latents outputs (the format: u64 LE header
// length N | N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__":
// {str: str}} | data). The header is padded with spaces to a multiple of 8 so every tensor's data
// starts 8-byte aligned in the file, as the reference implementation does.
//
// Ownership: entries only borrow their bytes; the caller keeps them alive during the call.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::cli {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", "F16"
  std::vector<int64_t> shape;
  absl::string_view data;  // row-major, little-endian; size must match shape x dtype size
};

// Bytes of one element of a safetensors dtype name, or 0 when this writer does not know it.
size_t SafetensorsDTypeSize(absl::string_view dtype);

// The complete file contents. INVALID_ARGUMENT when a name is empty or repeated, a dtype is
// unknown, a dimension is negative, or a data size does not match its shape.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsEntry>& entries,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace ditserve::cli
