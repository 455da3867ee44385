// Test support: paths of ../shared/fixtures, the reference tensors, and parity measures.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

#include "sharding/state_dict.h"

namespace ditserve::testing {

// ../shared/fixtures (compile-time default, overridable with DITSERVE_FIXTURES_DIR).
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

}  // namespace ditserve::testing
