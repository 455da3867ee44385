#include "tests/support/fixtures.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "sharding/torch_tensor.h"

namespace ditserve::testing {

std::string FixturesDir() {
  if (const char* env = std::getenv("DITSERVE_FIXTURES_DIR"); env && *env) return env;
  return DITSERVE_FIXTURES_DIR;
}

std::string BinaryDir() { return DITSERVE_BINARY_DIR; }

const std::map<std::string, torch::Tensor>& Reference() {
  static const auto* ref = [] {
    auto all = sharding::ReadAllTensors(FixturesDir() + "/reference.safetensors");
    if (!all.ok()) {
      ADD_FAILURE() << all.status();
      return new std::map<std::string, torch::Tensor>();
    }
    return new std::map<std::string, torch::Tensor>(std::move(*all));
  }();
  return *ref;
}

torch::Tensor Ref(const std::string& name) {
  const auto& ref = Reference();
  auto it = ref.find(name);
  if (it == ref.end()) {
    ADD_FAILURE() << "reference.safetensors has no tensor " << name;
    return {};
  }
  return it->second;
}

double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kFloat64).cpu().reshape({-1});
  auto b64 = b.to(torch::kFloat64).cpu().reshape({-1});
  if (a64.numel() != b64.numel()) return std::numeric_limits<double>::infinity();
  double denom = b64.norm().item<double>();
  double num = (a64 - b64).norm().item<double>();
  return denom == 0 ? num : num / denom;
}

sharding::ShardedStateDict LoadComponentFullFloat32(const std::string& component_dir) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& entry : std::filesystem::directory_iterator(component_dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    auto all = sharding::ReadAllTensors(entry.path().string());
    if (!all.ok()) {
      ADD_FAILURE() << all.status();
      continue;
    }
    for (auto& [name, t] : *all) {
      tensors[name] = t.is_floating_point() ? t.to(torch::kFloat32) : t;
    }
  }
  return sharding::ShardedStateDict(0, 1, std::move(tensors), {});
}

sharding::ShardedStateDict LoadComponentEdited(
    const std::string& component_dir,
    const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
  auto tensors = LoadComponentFullFloat32(component_dir).tensors();
  edit(tensors);
  return sharding::ShardedStateDict(0, 1, std::move(tensors), {});
}

sharding::ShardedStateDict CastWeights(const sharding::ShardedStateDict& sd,
                                       torch::ScalarType dtype) {
  std::map<std::string, torch::Tensor> cast;
  for (const auto& [name, t] : sd.tensors()) cast[name] = t.to(dtype);
  return sharding::ShardedStateDict(0, 1, std::move(cast), {});
}

}  // namespace ditserve::testing
