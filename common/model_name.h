// The model name a folder stands for: its last path component, ignoring trailing slashes
// ("…/FLUX.1-dev/" and "…/FLUX.1-dev" are both "FLUX.1-dev"). Used in ModelInfo, PNG metadata and
// ditserve_build_info. Pure; safe from any thread.
#pragma once

#include <filesystem>
#include <string>

namespace ditserve {

inline std::string ModelNameFromDir(const std::string& model_dir) {
  std::filesystem::path dir = std::filesystem::path(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  return dir.filename().string();
}

}  // namespace ditserve
