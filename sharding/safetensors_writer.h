// Writes safetensors files: the inverse of SafetensorsFile. Torch-free.
//
// Used to save replicated state dicts and tool outputs, by the CLI for its raw and latents outputs,
// by tests to build hand-made checkpoints, and by the benchmarks. The file is written to "<path>.tmp" and renamed into place, so a reader never sees
// a half-written file. The header is padded with spaces to a multiple of 8 bytes, as the format's
// reference writer does, so every tensor's data starts 8-byte aligned.
//
// Thread-safety: stateless; concurrent calls on different paths are safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// The whole file in memory: the bytes WriteSafetensors would write, for destinations that are not
// a plain file (stdout, a pipe). Refuses what WriteSafetensors refuses (INVALID_ARGUMENT).
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// One safetensors file written tensor by tensor, for files larger than the memory one would
// hold them in: Create() writes the header (from the tensors' names, dtypes and shapes; `data` is
// ignored), Append() takes the next tensor's bytes in the order given, Finish() renames
// "<path>.tmp" into place. A writer destroyed before a successful Finish() removes "<path>.tmp".
// Create() refuses what WriteSafetensors refuses (INVALID_ARGUMENT); Append() refuses bytes of the
// wrong size or past the last tensor (FAILED_PRECONDITION), Finish() a missing tensor.
// Thread-compatible: one thread at a time.
class SafetensorsFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFileWriter>> Create(
      const std::string& path, const std::vector<TensorToWrite>& tensors,
      const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsFileWriter();
  SafetensorsFileWriter(const SafetensorsFileWriter&) = delete;
  SafetensorsFileWriter& operator=(const SafetensorsFileWriter&) = delete;

  absl::Status Append(const void* data, uint64_t bytes);
  absl::Status Finish();

 private:
  SafetensorsFileWriter(std::string path, std::vector<TensorToWrite> tensors, std::FILE* file);
  absl::Status WriteFailed();

  std::string path_, tmp_;
  std::vector<TensorToWrite> tensors_;
  std::FILE* file_;  // owned; null once closed
  size_t next_ = 0;  // index of the tensor Append() expects
};

// The bytes of a safetensors header for `tensors` (u64 length prefix + padded JSON). Exposed so
// tests can build deliberately corrupt files around a valid header.
std::string SafetensorsHeaderBytes(const std::vector<TensorToWrite>& tensors,
                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace ditserve::sharding
