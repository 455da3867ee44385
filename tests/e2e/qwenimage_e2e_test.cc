// Qwen-Image prompt -> PNG with true CFG through the real binaries: ditserve-frontend with two
// spawned CPU workers (Gloo) on the qwenimage-tiny pipeline, driven by ditserve-cli with a
// negative prompt and no --true-cfg-scale (the model's default 4.0 applies, as in diffusers). The
// image must equal diffusers' QwenImagePipeline output (tests/fixtures/pipelines.json "qwenimage").
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "sharding/safetensors.h"
#include "sharding/torch_tensor.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixtures.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

TEST(QwenImageE2E, CliWithANegativePromptGivesDiffusersTrueCfgImage) {
  auto server = ServerProcess::Start({"--model", FixturesDir() + "/qwenimage-tiny",
                                      "--spawn-workers", "2", "--log-level", "info"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitUntilServing(std::chrono::seconds(180)))
      << "never became SERVING; log: " << (*server)->log_path();

  auto stub = v1::ImageGeneration::NewStub((*server)->Channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.family(), "qwenimage");
  EXPECT_TRUE(info.inputs().accepts_text_prompt());
  EXPECT_FLOAT_EQ(info.defaults().true_cfg_scale(), 4.0f);

  std::ifstream in(FixturesDir() + "/pipelines.json");
  const nlohmann::json c = nlohmann::json::parse(in)["qwenimage"];
  const std::string out =
      ::testing::TempDir() + "ditserve-qwen-e2e-" + std::to_string(::getpid()) + ".safetensors";
  ProcessResult r = RunProcess(
      {BinaryDir() + "/cli/ditserve-cli", "generate", "--server", (*server)->address(), "--prompt",
       c["prompt"].get<std::string>(), "--negative-prompt", c["negative_prompt"].get<std::string>(),
       "--height", std::to_string(c["height"].get<int>()), "--width",
       std::to_string(c["width"].get<int>()), "--steps",
       std::to_string(c["num_inference_steps"].get<int>()), "--seed",
       std::to_string(c["seed"].get<int>()), "--max-sequence-length",
       std::to_string(c["max_sequence_length"].get<int>()), "--format", "raw", "--quiet", "-o", out},
      {}, 180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto tensors = sharding::ReadAllTensors(out);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_TRUE(tensors->count("image"));
  EXPECT_LT(RelativeError(tensors->at("image"), Ref("qwenimage.pipe.image")), 1e-3);
  EXPECT_EQ((*server)->Stop(), 0) << "log: " << (*server)->log_path();
}

}  // namespace
}  // namespace ditserve::testing
