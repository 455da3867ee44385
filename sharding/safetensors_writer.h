// Writes safetensors files (SPEC §6): the inverse of SafetensorsFile. Torch-free.
//
// Used to save replicated state dicts, by tests to build hand-made checkpoints, and by the
// benchmarks. The file is written to "<path>.tmp" and renamed into place, so a reader never sees
// a half-written file. The header is padded with spaces to a multiple of 8 bytes, as the format's
// reference writer does, so every tensor's data starts 8-byte aligned.
//
// Thread-safety: stateless; concurrent calls on different paths are safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sharding/safetensors.h"

namespace ditserve::sharding {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel(shape) * DTypeSize(dtype) bytes, row-major; not owned
};

// Tensors are laid out back to back in the order given. INVALID_ARGUMENT on a duplicate or empty
// name, a negative dimension, or a null data pointer for a non-empty tensor; INTERNAL on I/O errors
// (naming the path).
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// The bytes of a safetensors header for `tensors` (u64 length prefix + padded JSON). Exposed so
// tests can build deliberately corrupt files around a valid header.
std::string SafetensorsHeaderBytes(const std::vector<TensorToWrite>& tensors,
                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace ditserve::sharding
