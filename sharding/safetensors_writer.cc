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

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

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

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
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
    if (t.data == nullptr && NumBytes(t) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' has no data"));
    }
  }
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  auto write = [&](const void* p, size_t n) {
    return n == 0 || std::fwrite(p, 1, n, f.get()) == n;
  };
  const std::string header = SafetensorsHeaderBytes(tensors, metadata);
  bool ok = write(header.data(), header.size());
  for (const auto& t : tensors) ok = ok && write(t.data, NumBytes(t));
  ok = ok && std::fflush(f.get()) == 0;
  const int err = errno;
  f.reset();
  if (!ok) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(tmp, ": write failed: ", std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rerr = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(rerr)));
  }
  return absl::OkStatus();
}

}  // namespace ditserve::sharding
