#include "models/lora/lora_files.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ditserve::lora {

namespace fs = std::filesystem;

absl::StatusOr<std::string> AdapterFileInFolder(const std::string& dir) {
  for (const char* name : {"pytorch_lora_weights.safetensors", "adapter_model.safetensors"}) {
    std::error_code ignored;
    const fs::path p = fs::path(dir) / name;
    if (fs::is_regular_file(p, ignored)) return p.string();
  }
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors") found.push_back(it->path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list it: ", ec.message()));
  if (found.size() == 1) return found[0];
  return absl::NotFoundError(absl::StrCat(
      "it holds ", found.empty() ? "no" : "several",
      " .safetensors files and no pytorch_lora_weights.safetensors or adapter_model.safetensors"));
}

absl::StatusOr<std::string> ResolveLoraFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat("LoRA adapter '", path, "' does not exist"));
  }
  auto file = AdapterFileInFolder(path);
  if (!file.ok()) {
    return absl::NotFoundError(absl::StrCat("LoRA adapter folder '", path,
                                            "' holds no adapter: ", file.status().message()));
  }
  return file;
}

}  // namespace ditserve::lora
