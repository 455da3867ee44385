#include "sharding/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "sharding/model_files.h"
#include "sharding/model_json.h"

namespace ditserve::sharding {
namespace fs = std::filesystem;
namespace {

constexpr absl::string_view kDiffusersWeights = "diffusion_pytorch_model.safetensors";
constexpr absl::string_view kTransformersWeights = "model.safetensors";
constexpr absl::string_view kIndexSuffix = ".safetensors.index.json";

bool IsPickleWeights(const std::string& file) {
  for (absl::string_view ext : {".bin", ".pt", ".ckpt", ".pth", ".bin.index.json"}) {
    if (absl::EndsWith(file, ext)) return true;
  }
  return false;
}

bool RegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Picks the index or single weights file of a component folder (see the header for the order).
struct WeightsChoice {
  std::string index;   // file name, or ""
  std::string single;  // file name, or ""
};

absl::StatusOr<WeightsChoice> ChooseWeights(const std::string& dir) {
  std::vector<std::string> indexes, singles, pickles;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, kIndexSuffix)) {
      indexes.push_back(name);
    } else if (absl::EndsWith(name, ".safetensors")) {
      singles.push_back(name);
    } else if (IsPickleWeights(name)) {
      pickles.push_back(name);
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::sort(indexes.begin(), indexes.end());
  std::sort(singles.begin(), singles.end());
  std::sort(pickles.begin(), pickles.end());
  auto has = [](const std::vector<std::string>& v, const std::string& name) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };
  WeightsChoice choice;
  for (absl::string_view base : {kDiffusersWeights, kTransformersWeights}) {
    const std::string index = absl::StrCat(base, ".index.json");
    if (has(indexes, index)) {
      choice.index = index;
      return choice;
    }
  }
  for (absl::string_view base : {kDiffusersWeights, kTransformersWeights}) {
    if (has(singles, std::string(base))) {
      choice.single = std::string(base);
      return choice;
    }
  }
  if (indexes.size() == 1) {
    choice.index = indexes[0];
    return choice;
  }
  if (indexes.size() > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": several safetensors index files and none is ", kDiffusersWeights,
                     ".index.json: ", absl::StrJoin(indexes, ", ")));
  }
  if (singles.size() == 1) {
    choice.single = singles[0];
    return choice;
  }
  if (singles.size() > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": several safetensors files but no index to tie them together: ",
                     absl::StrJoin(singles, ", ")));
  }
  if (!pickles.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, ": weights are pickle files (", absl::StrJoin(pickles, ", "),
        "), which are refused: they can run arbitrary code. Convert them to safetensors."));
  }
  return absl::NotFoundError(absl::StrCat(dir, ": no weights: expected ", kDiffusersWeights, ", ",
                                          kTransformersWeights, " or a *", kIndexSuffix,
                                          " with its shards"));
}

// Parses an index file into tensor -> shard file name.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  ASSIGN_OR_RETURN(nlohmann::json index, ReadJsonObjectFile(index_path));
  return ParseWeightMap(index, index_path);
}

}  // namespace

absl::StatusOr<nlohmann::json> ReadComponentConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!RegularFile(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": missing (not a model component folder?)"));
  }
  // Symbolic links in the folder must stay inside the model folder (model_files.h).
  RETURN_IF_ERROR(CheckComponentFolderLinks(dir));
  ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonObjectFile(path));
  RETURN_IF_ERROR(CheckComponentConfig(config, path));
  return config;
}

absl::StatusOr<std::unique_ptr<ComponentCheckpoint>> ComponentCheckpoint::Open(
    const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  std::unique_ptr<ComponentCheckpoint> ckpt(new ComponentCheckpoint());
  ckpt->dir_ = dir;
  ASSIGN_OR_RETURN(ckpt->config_, ReadComponentConfig(dir));
  auto cls = ckpt->config_.find("_class_name");
  if (cls != ckpt->config_.end() && cls->is_string()) ckpt->class_name_ = cls->get<std::string>();

  ASSIGN_OR_RETURN(WeightsChoice choice, ChooseWeights(dir));
  if (!choice.single.empty()) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((fs::path(dir) / choice.single).string()));
    for (const auto& info : file->tensors()) ckpt->tensors_[info.name] = {file.get(), &info};
    ckpt->files_.push_back(std::move(file));
    return ckpt;
  }

  ckpt->index_file_ = (fs::path(dir) / choice.index).string();
  ASSIGN_OR_RETURN(auto weight_map, ReadWeightMap(ckpt->index_file_));
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [tensor, shard] : weight_map) {
    if (opened.count(shard)) continue;
    const std::string path = (fs::path(dir) / shard).string();
    if (!RegularFile(path)) {
      return absl::NotFoundError(absl::StrCat(ckpt->index_file_, ": shard '", shard,
                                              "' (holding tensor '", tensor,
                                              "') does not exist"));
    }
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
    opened[shard] = file.get();
    ckpt->files_.push_back(std::move(file));
  }
  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile* file = opened.at(shard);
    auto info = file->Find(tensor);
    if (!info.ok()) {
      return absl::DataLossError(absl::StrCat(ckpt->index_file_, ": weight_map puts tensor '",
                                              tensor, "' in '", shard,
                                              "', but that file has no such tensor"));
    }
    ckpt->tensors_[tensor] = {file, *info};
  }
  return ckpt;
}

std::vector<std::string> ComponentCheckpoint::weight_files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

absl::StatusOr<TensorLocation> ComponentCheckpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": checkpoint has no tensor '", name, "'"));
  }
  return it->second;
}

uint64_t ComponentCheckpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, loc] : tensors_) total += loc.info->nbytes();
  return total;
}

}  // namespace ditserve::sharding
