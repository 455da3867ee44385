#include "sharding/pipeline_index.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "sharding/model_files.h"

namespace ditserve::sharding {
namespace fs = std::filesystem;

const PipelineComponent* PipelineIndex::Find(absl::string_view name) const {
  for (const auto& c : components) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

absl::StatusOr<std::string> PipelineIndex::ComponentDir(absl::string_view name) const {
  if (Find(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat(root, "/model_index.json: no component '", name, "'"));
  }
  return (fs::path(root) / std::string(name)).string();
}

bool IsPipelineRoot(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "model_index.json", ec);
}

absl::StatusOr<PipelineIndex> ReadPipelineIndex(const std::string& root) {
  const std::string path = (fs::path(root) / "model_index.json").string();
  // Symbolic links anywhere in the folder must stay inside it (model_files.h); checked before any
  // file of it is read. A missing folder is left to the reader's NOT_FOUND.
  std::error_code ec;
  if (fs::exists(root, ec)) {
    absl::Status links = CheckModelFolderLinks(root);
    if (!links.ok()) return links;
  }
  absl::StatusOr<nlohmann::json> read = ReadJsonObjectFile(path);
  if (!read.ok()) return read.status();
  const nlohmann::json& j = *read;
  PipelineIndex index;
  index.root = root;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "_class_name") {
      if (it.value().is_string()) index.class_name = it.value().get<std::string>();
      continue;
    }
    if (!key.empty() && key[0] == '_') continue;  // _diffusers_version, _name_or_path, ...
    const auto& v = it.value();
    // Components are [library, class]; other keys are pipeline options (e.g. booleans).
    if (!v.is_array()) continue;
    if (v.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": component '", key, "' must be [library, class]"));
    }
    if (v[0].is_null() && v[1].is_null()) continue;
    if (!v[0].is_string() || !v[1].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": component '", key, "' must be [library, class] strings"));
    }
    index.components.push_back({key, v[0].get<std::string>(), v[1].get<std::string>()});
  }
  if (index.class_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing '_class_name'"));
  }
  return index;
}

absl::StatusOr<std::string> ResolveComponentDir(const std::string& path,
                                                absl::string_view component) {
  if (!IsPipelineRoot(path)) return path;
  auto index = ReadPipelineIndex(path);
  if (!index.ok()) return index.status();
  return index->ComponentDir(component);
}

}  // namespace ditserve::sharding
