#include "sharding/pipeline_index.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "sharding/model_files.h"
#include "sharding/model_json.h"

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
  return ParsePipelineIndex(*read, root, path);
}

absl::StatusOr<std::string> ResolveComponentDir(const std::string& path,
                                                absl::string_view component) {
  if (!IsPipelineRoot(path)) return path;
  auto index = ReadPipelineIndex(path);
  if (!index.ok()) return index.status();
  return index->ComponentDir(component);
}

}  // namespace ditserve::sharding
