#include "sharding/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ditserve::sharding {
namespace {

uint64_t NumBytes(const TensorToWrite& t) {
  uint64_t n = DTypeSize(t.dtype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

std::string SafetensorsHeaderBytes(const std::vector<TensorToWrite>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const uint64_t n = NumBytes(t);
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json;
}

namespace {

// `path` names the destination in errors. With `need_data`, a non-empty tensor without data is
// refused as well.
absl::Status CheckTensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                          bool need_data = false) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": invalid tensor name '", t.name, "'"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": duplicate tensor '", t.name, "'"));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", t.name, "' has a negative dimension"));
      }
    }
    if (need_data && t.data == nullptr && NumBytes(t) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' has no data"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFileWriter>> SafetensorsFileWriter::Create(
    const std::string& path, const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  if (absl::Status s = CheckTensors(path, tensors); !s.ok()) return s;
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  std::unique_ptr<SafetensorsFileWriter> w(new SafetensorsFileWriter(path, tensors, f));
  const std::string header = SafetensorsHeaderBytes(tensors, metadata);
  if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) return w->WriteFailed();
  return w;
}

SafetensorsFileWriter::SafetensorsFileWriter(std::string path, std::vector<TensorToWrite> tensors,
                                             std::FILE* file)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), tensors_(std::move(tensors)), file_(file) {
  for (auto& t : tensors_) t.data = nullptr;  // the caller's buffers are not kept
}

SafetensorsFileWriter::~SafetensorsFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

absl::Status SafetensorsFileWriter::WriteFailed() {
  const int err = errno;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(tmp_.c_str());
  return absl::InternalError(absl::StrCat(tmp_, ": write failed: ", std::strerror(err)));
}

absl::Status SafetensorsFileWriter::Append(const void* data, uint64_t bytes) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(tmp_, ": already closed"));
  if (next_ >= tensors_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(tmp_, ": all ", tensors_.size(), " tensors are written already"));
  }
  const TensorToWrite& t = tensors_[next_];
  if (bytes != NumBytes(t)) {
    return absl::FailedPreconditionError(absl::StrCat(tmp_, ": tensor '", t.name, "' needs ",
                                                      NumBytes(t), " bytes, got ", bytes));
  }
  if (bytes > 0 && data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", t.name, "' has no data"));
  }
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) return WriteFailed();
  ++next_;
  return absl::OkStatus();
}

absl::Status SafetensorsFileWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(tmp_, ": already closed"));
  if (next_ != tensors_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        tmp_, ": tensor '", tensors_[next_].name, "' and ", tensors_.size() - next_ - 1,
        " more were never written"));
  }
  if (std::fflush(file_) != 0) return WriteFailed();
  const bool closed = std::fclose(file_) == 0;
  const int err = errno;
  file_ = nullptr;
  if (!closed) {
    std::remove(tmp_.c_str());
    return absl::InternalError(absl::StrCat(tmp_, ": write failed: ", std::strerror(err)));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int rerr = errno;
    std::remove(tmp_.c_str());
    return absl::InternalError(absl::StrCat(path_, ": rename failed: ", std::strerror(rerr)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  if (absl::Status s = CheckTensors("safetensors", tensors, /*need_data=*/true); !s.ok()) return s;
  std::string out = SafetensorsHeaderBytes(tensors, metadata);
  for (const auto& t : tensors) {
    if (NumBytes(t) > 0) out.append(static_cast<const char*>(t.data), NumBytes(t));
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // Create() checks names and shapes, Append() a missing data pointer (and a failed write leaves
  // no file behind).
  auto writer = SafetensorsFileWriter::Create(path, tensors, metadata);
  if (!writer.ok()) return writer.status();
  for (const auto& t : tensors) {
    if (absl::Status s = (*writer)->Append(t.data, NumBytes(t)); !s.ok()) return s;
  }
  return (*writer)->Finish();
}

}  // namespace ditserve::sharding
