#include "cli/safetensors_writer.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ditserve::cli {

size_t SafetensorsDTypeSize(absl::string_view dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsEntry>& entries,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.name.empty() || e.name == "__metadata__" || !names.insert(e.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: bad or repeated tensor name '", e.name, "'"));
    }
    size_t element = SafetensorsDTypeSize(e.dtype);
    if (element == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", e.name, "' has unknown dtype '", e.dtype, "'"));
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors: tensor '", e.name, "' has a negative dimension"));
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * element != e.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", e.name, "' has ", e.data.size(),
                       " bytes, its shape needs ", numel * element));
    }
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  // Same order as the offsets above.
  for (const SafetensorsEntry& e : entries) out.append(e.data.data(), e.data.size());
  return out;
}

}  // namespace ditserve::cli
