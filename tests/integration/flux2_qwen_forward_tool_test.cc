// `ditserve-tool forward` on the FLUX.2 and Qwen-Image transformers as real processes: tp = 1 in
// one process, tp = 2 and 4 as Gloo worker processes spawned by the tool (each loading its own
// shard with the model's built-in plan), each compared with diffusers' flux2.out / qwenimage.out.
// The model is picked by config.json's _class_name through the transformer factory. The Qwen-Image
// reference has no img_shapes tensor: the model derives the 8 × 8 grid from N = 64.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve {
namespace {

struct Case {
  const char* model;   // folder under fixtures/
  const char* prefix;  // argument prefix in reference.safetensors
};
constexpr Case kFlux2{"flux2-tiny/transformer", "flux2."};
constexpr Case kQwen{"qwenimage-tiny/transformer", "qwenimage."};

std::string Tool() { return testing::BinaryDir() + "/tools/ditserve-tool"; }

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ditserve_flux2qwen_" + std::to_string(getpid()) + "_" + name))
      .string();
}

int RunForward(const Case& c, const std::string& extra, const std::string& output,
               const std::string& prefix) {
  const std::string cmd = "'" + Tool() + "' forward --model '" + testing::FixturesDir() + "/" +
                          c.model + "' --inputs '" + testing::FixturesDir() +
                          "/reference.safetensors' --prefix '" + prefix + "' --output '" + output +
                          "' --timeout-ms 60000 " + extra;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void ExpectMatchesReference(const Case& c, int tp) {
  const std::string out = TempPath(std::string(c.prefix) + "tp" + std::to_string(tp) + ".safetensors");
  ASSERT_EQ(RunForward(c, "--tp " + std::to_string(tp), out, c.prefix), 0);
  auto tensors = sharding::ReadAllTensors(out);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->count("out"), 1u);
  const auto& got = tensors->at("out");
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  const auto ref = testing::Ref(std::string(c.prefix) + "out");
  EXPECT_EQ(got.sizes(), ref.sizes());
  const double err = testing::RelativeError(got, ref);
  EXPECT_LT(err, 1e-4) << c.prefix << " tp " << tp << " relative error " << err;
  std::filesystem::remove(out);
}

TEST(Flux2ForwardTool, Tp1) { ExpectMatchesReference(kFlux2, 1); }
TEST(Flux2ForwardTool, Tp2Processes) { ExpectMatchesReference(kFlux2, 2); }
TEST(Flux2ForwardTool, Tp4Processes) { ExpectMatchesReference(kFlux2, 4); }
TEST(QwenImageForwardTool, Tp1) { ExpectMatchesReference(kQwen, 1); }
TEST(QwenImageForwardTool, Tp2Processes) { ExpectMatchesReference(kQwen, 2); }
TEST(QwenImageForwardTool, Tp4Processes) { ExpectMatchesReference(kQwen, 4); }

TEST(Flux2QwenForwardTool, FailsCleanly) {
  const std::string out = TempPath("bad.safetensors");
  EXPECT_NE(RunForward(kFlux2, "--tp 3", out, kFlux2.prefix), 0);  // 3 does not divide 4 heads
  EXPECT_NE(RunForward(kQwen, "--tp 3", out, kQwen.prefix), 0);
  // FLUX.2 arguments under the Qwen prefix: missing required tensors on every rank.
  EXPECT_NE(RunForward(kFlux2, "--tp 2", out, kQwen.prefix), 0);
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace ditserve
