// Test support: paths of tests/fixtures (the repository's generated fixtures, tests/fixtures/README.md), the reference tensors, parity measures, and the
// fixture components' weights and configs as the model tests load them.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "sharding/state_dict.h"

namespace ditserve::testing {

// tests/fixtures (compile-time default, overridable with DITSERVE_FIXTURES_DIR).
std::string FixturesDir();
// Directory of the build tree (for binaries under test).
std::string BinaryDir();

// Every tensor of fixtures/reference.safetensors, as stored (float32 / int64), loaded once.
const std::map<std::string, torch::Tensor>& Reference();
// One reference tensor; fails the current test (ADD_FAILURE) and returns an empty tensor if absent.
torch::Tensor Ref(const std::string& name);

// ||a - b|| / ||b|| in float64.
double RelativeError(const torch::Tensor& a, const torch::Tensor& b);

// Every tensor of every *.safetensors file in a component folder, replicated (tp = 1), float32 on
// the CPU. Test-only shortcut for model tests that do not exercise the loader.
sharding::ShardedStateDict LoadComponentFullFloat32(const std::string& component_dir);
// LoadComponentFullFloat32 with `edit` applied to the tensors (renamed, removed, replaced ones).
sharding::ShardedStateDict LoadComponentEdited(
    const std::string& component_dir,
    const std::function<void(std::map<std::string, torch::Tensor>&)>& edit);
// A replicated (tp = 1) copy of `sd`'s tensors converted to `dtype` (nothing sharded).
sharding::ShardedStateDict CastWeights(const sharding::ShardedStateDict& sd,
                                       torch::ScalarType dtype);

// The value of a fixture load (a config, say); on error a failure of the current test (EXPECT)
// naming the status, and T{}.
template <typename T>
T ValueOrAddFailure(absl::StatusOr<T> loaded) {
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : T{};
}

}  // namespace ditserve::testing
