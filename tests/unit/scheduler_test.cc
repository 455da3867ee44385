// FlowMatchEulerScheduler against diffusers' schedules (reference.safetensors) and diffusers scheduling_flow_match_euler_discrete.py values.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "pipeline/latents.h"
#include "pipeline/scheduler.h"
#include "tests/support/fixtures.h"

namespace ditserve {
namespace {

using pipeline::FlowMatchEulerScheduler;
using pipeline::FlowMatchSchedulerConfig;
using testing::Ref;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

FlowMatchSchedulerConfig FluxConfig() {
  auto c = pipeline::ParseFlowMatchSchedulerConfig(
      ReadJson(testing::FixturesDir() + "/flux1-tiny/scheduler/scheduler_config.json"));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : FlowMatchSchedulerConfig{};
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

TEST(Scheduler, ParsesFluxConfig) {
  auto c = FluxConfig();
  EXPECT_TRUE(c.use_dynamic_shifting);
  EXPECT_EQ(c.base_image_seq_len, 256);
  EXPECT_EQ(c.max_image_seq_len, 4096);
  EXPECT_DOUBLE_EQ(c.base_shift, 0.5);
  EXPECT_DOUBLE_EQ(c.max_shift, 1.15);
  EXPECT_FALSE(c.shift_terminal.has_value());
}

TEST(Scheduler, MatchesEverySchedEntry) {
  const std::regex name_re(R"(sched\.n(\d+)_seq(\d+)\.sigmas)");
  int checked = 0;
  for (const auto& [name, t] : testing::Reference()) {
    std::smatch m;
    if (!std::regex_match(name, m, name_re)) continue;
    const int steps = std::stoi(m[1]);
    const int64_t seq = std::stoll(m[2]);
    FlowMatchEulerScheduler s(FluxConfig());
    ASSERT_TRUE(s.SetTimesteps(pipeline::FluxSigmas(steps), pipeline::CalculateShift(seq, s.config())).ok());
    const std::string prefix = name.substr(0, name.size() - std::string(".sigmas").size());
    EXPECT_LT(MaxAbsDiff(s.sigmas(), Ref(prefix + ".sigmas")), 1e-6) << prefix;
    EXPECT_LT(MaxAbsDiff(s.timesteps(), Ref(prefix + ".timesteps")) / 1000.0, 1e-6) << prefix;
    EXPECT_EQ(s.sigmas().numel(), steps + 1);
    EXPECT_EQ(s.sigmas()[steps].item<float>(), 0.0f);
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(Scheduler, MatchesFlux1Call) {
  const auto call = ReadJson(testing::FixturesDir() + "/flux1_call.json");
  const auto vae = ReadJson(testing::FixturesDir() + "/flux1-tiny/vae/config.json");
  const int64_t factor = pipeline::VaeScaleFactor(vae["block_out_channels"].size());
  EXPECT_EQ(factor, 2);
  const int64_t h = pipeline::LatentSide(call["height"].get<int64_t>(), factor);
  const int64_t w = pipeline::LatentSide(call["width"].get<int64_t>(), factor);
  const int64_t seq = (h / 2) * (w / 2);
  EXPECT_EQ(seq, 64);
  FlowMatchEulerScheduler s(FluxConfig());
  const double mu = pipeline::CalculateShift(seq, s.config());
  EXPECT_NEAR(mu, 0.4675, 1e-12);  // 0.5 + (64 - 256) · 0.65 / 3840, below base_shift: not clamped
  ASSERT_TRUE(s.SetTimesteps(pipeline::FluxSigmas(call["steps"].get<int>()), mu).ok());
  EXPECT_LT(MaxAbsDiff(s.sigmas(), Ref("flux1.sigmas")), 1e-6);
  EXPECT_LT(MaxAbsDiff(s.timesteps(), Ref("flux1.timesteps")) / 1000.0, 1e-6);
}

TEST(Scheduler, SpecAnchors) {
  // pipeline_flux.py's calculate_shift: 1024², N = 28, mu = 1.15.
  FlowMatchEulerScheduler s(FluxConfig());
  EXPECT_NEAR(pipeline::CalculateShift(4096, s.config()), 1.15, 1e-12);
  EXPECT_NEAR(pipeline::CalculateShift(1024, s.config()), 0.63, 1e-12);
  EXPECT_NEAR(pipeline::CalculateShift(16384, s.config()), 3.23, 1e-12);
  ASSERT_TRUE(s.SetTimesteps(pipeline::FluxSigmas(28), 1.15).ok());
  EXPECT_EQ(s.sigma(0), 1.0f);
  EXPECT_NEAR(s.sigma(1), 0.98840863, 1e-7);
  EXPECT_NEAR(s.sigma(27), 0.10472090, 1e-7);
  EXPECT_NEAR(pipeline::ComputeEmpiricalMu(4096, 50), 2.0233512, 1e-6);
  EXPECT_NEAR(pipeline::ComputeEmpiricalMu(4096, 28), 2.1514432, 1e-6);
  EXPECT_NEAR(pipeline::ComputeEmpiricalMu(8192, 28), 0.00016927 * 8192 + 0.45666666, 1e-12);
}

TEST(Scheduler, LinspaceMatchesNumpy) {
  auto s = pipeline::FluxSigmas(4);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0], 1.0);
  EXPECT_EQ(s[3], 0.25);
  EXPECT_EQ(s[1], 1.0 * -0.25 + 1.0);
  EXPECT_EQ(pipeline::FluxSigmas(1), std::vector<double>{1.0});
}

TEST(Scheduler, ShiftTerminalStretchesToTheTerminal) {
  auto c = FluxConfig();
  c.shift_terminal = 0.02;
  FlowMatchEulerScheduler s(c);
  ASSERT_TRUE(s.SetTimesteps(pipeline::FluxSigmas(10), 0.8).ok());
  EXPECT_NEAR(s.sigma(9), 0.02, 1e-6);
  EXPECT_EQ(s.sigma(0), 1.0f);
  EXPECT_EQ(s.sigma(10), 0.0f);
}

TEST(Scheduler, StaticShiftWithoutDynamicShifting) {
  FlowMatchSchedulerConfig c;
  c.shift = 3.0;
  FlowMatchEulerScheduler s(c);
  ASSERT_TRUE(s.SetTimesteps({1.0, 0.5}, std::nullopt).ok());
  EXPECT_EQ(s.sigma(0), 1.0f);
  EXPECT_FLOAT_EQ(s.sigma(1), 0.75f);  // 3·0.5 / (1 + 2·0.5)
}

TEST(Scheduler, RefusesBadInput) {
  FlowMatchEulerScheduler s(FluxConfig());
  EXPECT_FALSE(s.SetTimesteps(pipeline::FluxSigmas(4), std::nullopt).ok());  // mu needed
  EXPECT_FALSE(s.SetTimesteps({}, 0.5).ok());
  ASSERT_TRUE(s.SetTimesteps(pipeline::FluxSigmas(4), 0.5).ok());
  auto x = torch::zeros({1, 4, 16});
  EXPECT_FALSE(s.Step(x, 4, x).ok());
  EXPECT_FALSE(s.Step(x, -1, x).ok());
  EXPECT_FALSE(s.Step(torch::zeros({1, 4, 8}), 0, x).ok());
  nlohmann::json bad = {{"use_karras_sigmas", true}};
  EXPECT_EQ(pipeline::ParseFlowMatchSchedulerConfig(bad).status().code(),
            absl::StatusCode::kUnimplemented);
  nlohmann::json wrong = {{"base_shift", "x"}};
  EXPECT_EQ(pipeline::ParseFlowMatchSchedulerConfig(wrong).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Scheduler, EulerStepDtypeSemantics) {
  FlowMatchEulerScheduler s(FluxConfig());
  ASSERT_TRUE(s.SetTimesteps(pipeline::FluxSigmas(28), 1.15).ok());
  torch::manual_seed(0);
  auto x = torch::randn({1, 4096, 64}).to(torch::kBFloat16);
  auto v = torch::randn({1, 4096, 64}).to(torch::kBFloat16);
  auto next = s.Step(v, 3, x);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->scalar_type(), torch::kBFloat16);
  // bf16(float32(x) + float32(bf16(bf16(dt) · v ) ) ), diffusers scheduling_flow_match_euler_discrete.py.
  const float dt = s.sigma(4) - s.sigma(3);
  auto dt_bf16 = torch::full({}, dt, torch::kFloat32).to(torch::kBFloat16);
  auto expected = (x.to(torch::kFloat32) + (dt_bf16 * v).to(torch::kFloat32)).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(*next, expected));
  // The fp32-product variant differs somewhere: the test can tell the two apart.
  auto fp32_product = (x.to(torch::kFloat32) + dt * v.to(torch::kFloat32)).to(torch::kBFloat16);
  EXPECT_FALSE(torch::equal(*next, fp32_product));
  // float32: plain x + dt·v; the last step goes to σ = 0.
  auto xf = torch::randn({2, 3}), vf = torch::randn({2, 3});
  auto last = s.Step(vf, 27, xf);
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(torch::allclose(*last, xf - s.sigma(27) * vf, 0, 1e-6));
}

}  // namespace
}  // namespace ditserve
