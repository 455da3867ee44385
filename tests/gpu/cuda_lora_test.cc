// LoRA adapters on the GPU (skipped where torch sees no CUDA device): the flux1-tiny transformer
// loaded on CUDA at tp 1 and 2 (in-process ranks on the one GPU; modulation sharded as served) in
// float32 and bfloat16, with the fixture adapters (tests/fixtures/LORA.md) merged and as runtime
// terms: the step-0 output against diffusers' (float32 within 1e-4, bfloat16 within 2e-2), and the
// unadapted output afterwards bit-identical to the one before.
#include <gtest/gtest.h>

#include <mutex>
#include <tuple>

#include <torch/torch.h>

#include "comm/local_communicator.h"
#include "models/lora/lora_library.h"
#include "models/transformer_factory.h"
#include "sharding/checkpoint.h"
#include "sharding/loader.h"
#include "sharding/torch_tensor.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

torch::Tensor LoraRef(const std::string& name) {
  auto all = sharding::ReadAllTensors(FixturesDir() + "/lora_reference.safetensors");
  EXPECT_TRUE(all.ok()) << all.status();
  return all.ok() && all->count(name) ? all->at(name) : torch::Tensor();
}

class CudaLoraTest
    : public ::testing::TestWithParam<std::tuple<int, torch::ScalarType, lora::LoraMode>> {};

TEST_P(CudaLoraTest, AdaptedForwardMatchesDiffusersAndTheBaseIsRestored) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  // Not a structured binding: the lambdas below capture these (C++17 forbids capturing bindings).
  const auto world = std::get<0>(GetParam());
  const auto dtype = std::get<1>(GetParam());
  const auto mode = std::get<2>(GetParam());
  const std::string dir = FixturesDir() + "/flux1-tiny/transformer";
  std::mutex mu;
  std::map<std::string, torch::Tensor> outs;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    auto ckpt = sharding::ComponentCheckpoint::Open(dir);
    if (!ckpt.ok()) return ckpt.status();
    auto plan = sharding::BuiltinTpPlan((*ckpt)->class_name(), (*ckpt)->config());
    if (!plan.ok()) return plan.status();
    if (world > 1) sharding::AddModulationSharding(&*plan);
    sharding::LoadOptions load;
    load.device = torch::Device(torch::kCUDA, 0);
    load.dtype = dtype;
    auto sd = sharding::LoadShard(**ckpt, &*plan, c.rank(), world, load);
    if (!sd.ok()) return sd.status();
    auto model = models::CreateTransformer((*ckpt)->config(), *sd, &c);
    if (!model.ok()) return model.status();
    auto lib = lora::LoraLibrary::Load({{"style", FixturesDir() + "/lora/style"},
                                        {"detail", FixturesDir() + "/lora/detail.safetensors"}},
                                       (*model)->linear_layers(), c.rank(), world, load, mode);
    if (!lib.ok()) return lib.status();
    std::map<std::string, torch::Tensor> args;
    for (const char* name : {"hidden_states", "encoder_hidden_states", "pooled_projections",
                             "timestep", "img_ids", "txt_ids", "guidance"}) {
      args[name] = Ref(std::string("flux1.step0.in.") + name);
    }
    auto run = [&](const std::string& name, const std::vector<lora::LoraChoice>& choices) -> absl::Status {
      auto active = (*lib)->Activate(choices);
      if (!active.ok()) return active.status();
      auto y = (*model)->Forward(args);
      if (!y.ok()) return y.status();
      if (!y->is_cuda()) return absl::InternalError("the forward did not run on the GPU");
      if (c.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        outs[name] = y->to(torch::kCPU, torch::kFloat32);
      }
      return absl::OkStatus();
    };
    for (const auto& [name, choices] : std::vector<std::pair<std::string, std::vector<lora::LoraChoice>>>{
             {"base", {}},
             {"style_0.8", {{"style", 0.8f}}},
             {"style_0.8+detail_-0.5", {{"detail", -0.5f}, {"style", 0.8f}}},
             {"base_after", {}}}) {
      if (auto st = run(name, choices); !st.ok()) return st;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  const double limit = dtype == torch::kFloat32 ? 1e-4 : 2e-2;
  for (const char* name : {"style_0.8", "style_0.8+detail_-0.5"}) {
    const double err = RelativeError(outs[name], LoraRef(std::string("lora.step0.") + name));
    EXPECT_LT(err, limit) << name;
    std::printf("LoRA %s on cuda, tp=%d %s %s: relative error %.3g (limit %.0e)\n", name, world,
                c10::toString(dtype), mode == lora::LoraMode::kMerge ? "merge" : "runtime", err,
                limit);
  }
  EXPECT_TRUE(torch::equal(outs["base_after"], outs["base"]));
}

INSTANTIATE_TEST_SUITE_P(
    TpDtypeMode, CudaLoraTest,
    ::testing::Combine(::testing::Values(1, 2), ::testing::Values(torch::kFloat32, torch::kBFloat16),
                       ::testing::Values(lora::LoraMode::kMerge, lora::LoraMode::kRuntime)));

}  // namespace
}  // namespace ditserve::testing
