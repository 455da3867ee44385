// `ditserve-tool forward` as real processes: tp = 1 in one process, tp = 2 and 4 as Gloo worker
// processes spawned by the tool, each compared with diffusers' flux1.step0.out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve {
namespace {

std::string Tool() { return testing::BinaryDir() + "/tools/ditserve-tool"; }

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ditserve_flux1_" + std::to_string(getpid()) + "_" + name))
      .string();
}

int RunForward(const std::string& extra, const std::string& output,
               const std::string& prefix = "flux1.step0.in.") {
  const std::string cmd = "'" + Tool() + "' forward --model '" + testing::FixturesDir() +
                          "/flux1-tiny' --inputs '" + testing::FixturesDir() +
                          "/reference.safetensors' --prefix '" + prefix + "' --output '" + output +
                          "' --timeout-ms 60000 " + extra;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void ExpectMatchesReference(int tp) {
  const std::string out = TempPath("tp" + std::to_string(tp) + ".safetensors");
  ASSERT_EQ(RunForward("--tp " + std::to_string(tp), out), 0);
  auto tensors = sharding::ReadAllTensors(out);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->count("out"), 1u);
  const auto& got = tensors->at("out");
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  const double err = testing::RelativeError(got, testing::Ref("flux1.step0.out"));
  EXPECT_LT(err, 1e-4) << "tp " << tp << " relative error " << err;
  std::filesystem::remove(out);
}

TEST(Flux1ForwardTool, Tp1) { ExpectMatchesReference(1); }
TEST(Flux1ForwardTool, Tp2Processes) { ExpectMatchesReference(2); }
TEST(Flux1ForwardTool, Tp4Processes) { ExpectMatchesReference(4); }

TEST(Flux1ForwardTool, FailsCleanly) {
  const std::string out = TempPath("bad.safetensors");
  EXPECT_NE(RunForward("--tp 3", out), 0);                         // 3 does not divide 4 heads
  EXPECT_NE(RunForward("--tp 2", out, "nosuch."), 0);  // missing inputs on every rank
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace ditserve
