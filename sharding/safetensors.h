// A validating, memory-mapped reader for the safetensors format. Torch-free.
//
// Layout: u64 little-endian header length N | N bytes of UTF-8 JSON | data buffer. The JSON maps
// tensor name -> {dtype, shape, data_offsets: [begin, end)} (relative to the data buffer), plus an
// optional "__metadata__" string map. Open() validates everything before any tensor byte is used:
// header length against the file size, JSON syntax, known dtypes, shape x element size == byte
// length, offsets inside the data buffer, no overlap, no duplicate names. Every error names the
// file and, where there is one, the tensor. Reading never goes out of bounds.
//
// Two ways to get at tensor bytes: Data() (a pointer into a read-only mapping; touching it makes the
// pages count to this process's RSS, and a file truncated behind our back raises SIGBUS) and
// ReadTensorBytes() (pread into a caller buffer: bounded memory, truncation becomes a DATA_LOSS
// error). The per-rank loader uses ReadTensorBytes only.
//
// Ownership: a SafetensorsFile owns its mapping and file descriptor (RAII, released in the
// destructor); TensorInfo data pointers are valid while the file lives. Thread-safety: immutable
// after Open(), so concurrent reads (Data, ReadTensorBytes) are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::sharding {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

absl::StatusOr<DType> ParseDType(absl::string_view name);
absl::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offset inside the data buffer
  uint64_t end = 0;
  uint64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// Parses and validates a header. `header_json` is the JSON text; `data_size` the size of the data
// buffer that follows it. `file` is used in error messages only. Exposed for the fuzzer and tests.
absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(
    absl::string_view header_json, uint64_t data_size, const std::string& file,
    std::map<std::string, std::string>* metadata = nullptr);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // NOT_FOUND naming the file and tensor when absent.
  absl::StatusOr<const TensorInfo*> Find(absl::string_view name) const;
  // Pointer to the first byte of a tensor's data (inside the mapping).
  const uint8_t* Data(const TensorInfo& info) const { return data_ + info.begin; }
  uint64_t data_size() const { return data_size_; }
  // Copies `length` bytes starting `offset` bytes into `info`'s data to `dst` with pread.
  // INVALID_ARGUMENT when the range leaves the tensor; DATA_LOSS (naming file and tensor) when the
  // file is shorter than its header promised (e.g. truncated after Open).
  absl::Status ReadTensorBytes(const TensorInfo& info, uint64_t offset, uint64_t length,
                               void* dst) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t data_file_offset_ = 0;  // 8 + header length
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ditserve::sharding
