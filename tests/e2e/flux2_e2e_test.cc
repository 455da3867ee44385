// FLUX.2 prompt -> PNG through the real binaries: ditserve-frontend with two spawned CPU workers
// (Gloo) on the flux2-tiny pipeline (Mistral3 text encoder, FLUX.2 transformer and VAE), driven by
// ditserve-cli and over gRPC. The image must equal diffusers' Flux2Pipeline output
// (tests/fixtures/pipelines.json "flux2").
#include <gtest/gtest.h>
#include <png.h>

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

nlohmann::json Call() {
  std::ifstream in(FixturesDir() + "/pipelines.json");
  return nlohmann::json::parse(in)["flux2"];
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "ditserve-flux2-e2e-" + std::to_string(::getpid()) + "-" + name;
}

std::vector<std::string> CliArgs(const std::string& server, const std::string& out) {
  const nlohmann::json c = Call();
  return {BinaryDir() + "/cli/ditserve-cli", "generate", "--server", server, "--prompt",
          c["prompt"].get<std::string>(), "--height", std::to_string(c["height"].get<int>()),
          "--width", std::to_string(c["width"].get<int>()), "--steps",
          std::to_string(c["num_inference_steps"].get<int>()), "--seed",
          std::to_string(c["seed"].get<int>()), "--guidance", "4", "--max-sequence-length",
          std::to_string(c["max_sequence_length"].get<int>()), "-o", out};
}

class Flux2E2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The text encoder sharded over both workers, as for FLUX.2-dev on a node.
    auto server = ServerProcess::Start({"--model", FixturesDir() + "/flux2-tiny", "--spawn-workers",
                                        "2", "--text-encoder-placement", "sharded", "--log-level",
                                        "info"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ASSERT_TRUE(server_->WaitUntilServing(std::chrono::seconds(180)))
        << "never became SERVING; log: " << server_->log_path();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << "log: " << server_->log_path();
      delete server_;
      server_ = nullptr;
    }
  }
  static ServerProcess* server_;
};
ServerProcess* Flux2E2E::server_ = nullptr;

TEST_F(Flux2E2E, ModelInfoSaysPromptToImage) {
  auto stub = v1::ImageGeneration::NewStub(server_->Channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.family(), "flux2");
  EXPECT_EQ(info.tp_degree(), 2u);
  EXPECT_TRUE(info.inputs().accepts_text_prompt());
  EXPECT_FALSE(info.inputs().requires_prompt_embeddings());
  EXPECT_EQ(info.inputs().output_formats_size(), 0);  // every format
  EXPECT_EQ(info.defaults().num_inference_steps(), 50u);
}

TEST_F(Flux2E2E, CliWritesDiffusersImageAsPng) {
  const std::string out = TempPath("cat.png");
  ProcessResult r = RunProcess(CliArgs(server_->address(), out), {}, 180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()));
  image.format = PNG_FORMAT_RGB;
  torch::Tensor png = torch::empty({image.height, image.width, 3}, torch::kUInt8);
  ASSERT_TRUE(png_image_finish_read(&image, nullptr, png.data_ptr(), 0, nullptr));
  torch::Tensor ref = (Ref("flux2.pipe.image") * 255).round().to(torch::kInt32);
  ASSERT_EQ(png.sizes(), ref.sizes());
  EXPECT_LE((png.to(torch::kInt32) - ref).abs().max().item<int>(), 1);
}

TEST_F(Flux2E2E, RawImageEqualsDiffusers) {
  const std::string out = TempPath("cat.safetensors");
  std::vector<std::string> args = CliArgs(server_->address(), out);
  args.insert(args.end() - 2, {"--format", "raw", "--quiet"});
  ProcessResult r = RunProcess(args, {}, 180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto tensors = sharding::ReadAllTensors(out);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_TRUE(tensors->count("image"));
  EXPECT_LT(RelativeError(tensors->at("image"), Ref("flux2.pipe.image")), 1e-3);
}

TEST_F(Flux2E2E, TrueCfgIsRefusedNamingTheField) {
  auto stub = v1::ImageGeneration::NewStub(server_->Channel());
  v1::GenerateRequest req;
  req.set_prompt("a cat");
  req.set_negative_prompt("a dog");
  req.set_true_cfg_scale(4.0f);
  req.set_height(32);
  req.set_width(48);
  req.set_num_inference_steps(1);
  grpc::ClientContext ctx;
  v1::GenerateResponse resp;
  grpc::Status s = stub->Generate(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("true_cfg_scale"), std::string::npos) << s.error_message();
  // The group is intact: the next request succeeds.
  const std::string out = TempPath("after.png");
  EXPECT_EQ(RunProcess(CliArgs(server_->address(), out), {}, 180).exit_code, 0);
}

}  // namespace
}  // namespace ditserve::testing
