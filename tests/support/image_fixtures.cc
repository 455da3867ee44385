#include "tests/support/image_fixtures.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/remove_tree.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

namespace fs = std::filesystem;

// The assembled folders' parent, removed when the process exits.
struct AssemblyRoot {
  fs::path dir =
      fs::temp_directory_path() / ("ditserve-image-fixtures-" + std::to_string(::getpid()));
  ~AssemblyRoot() { (void)RemoveTree(dir.string()); }
};

}  // namespace

std::string ImageFixturesDir() {
  return FixturesDir() + "/image-inputs";
}

const nlohmann::json& ImageCalls() {
  static const nlohmann::json* calls = [] {
    std::ifstream in(ImageFixturesDir() + "/image_calls.json");
    auto* j = new nlohmann::json(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
    if (j->is_discarded()) ADD_FAILURE() << "image_calls.json is missing or not JSON";
    return j;
  }();
  return *calls;
}

const std::map<std::string, torch::Tensor>& ImageReference() {
  static const auto* ref = [] {
    auto all = sharding::ReadAllTensors(ImageFixturesDir() + "/image_reference.safetensors");
    if (!all.ok()) {
      ADD_FAILURE() << all.status();
      return new std::map<std::string, torch::Tensor>();
    }
    return new std::map<std::string, torch::Tensor>(std::move(*all));
  }();
  return *ref;
}

torch::Tensor ImageRef(const std::string& name) {
  const auto& ref = ImageReference();
  auto it = ref.find(name);
  if (it == ref.end()) {
    ADD_FAILURE() << "image_reference.safetensors has no tensor " << name;
    return {};
  }
  return it->second;
}

std::string AssembleImagePipeline(const std::string& call) {
  static AssemblyRoot root;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const fs::path dest = root.dir / call;
  if (fs::exists(dest)) return dest.string();
  const nlohmann::json& c = ImageCalls()["calls"][call];
  fs::create_directories(root.dir);
  fs::copy(FixturesDir() + "/" + c["base"].get<std::string>(), dest, fs::copy_options::recursive);
  // Not fs::remove_all: PyTorch 2.11's libtorch.so exports its own, which crashes (remove_tree.h).
  if (absl::Status removed = RemoveTree((dest / "vae").string()); !removed.ok()) {
    ADD_FAILURE() << removed;
  }
  fs::copy(ImageFixturesDir() + "/" + c["vae"].get<std::string>(), dest / "vae",
           fs::copy_options::recursive);
  if (c.contains("model_index_class")) {
    nlohmann::json index;
    std::ifstream(dest / "model_index.json") >> index;
    index["_class_name"] = c["model_index_class"];
    std::ofstream(dest / "model_index.json") << index.dump(2) << "\n";
  }
  return dest.string();
}

std::string ImageInputBytes(const std::string& name) {
  std::ifstream in(ImageFixturesDir() + "/inputs/" + name, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace ditserve::testing
