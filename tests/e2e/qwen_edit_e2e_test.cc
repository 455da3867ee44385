// Qwen-Image-Edit-2509 (issue 34) through the real binaries: ditserve-frontend with 1 and with 2
// spawned CPU workers (Gloo) on a tiny QwenImageEditPlusPipeline folder (tests/support/
// qwen_edit_tiny_folder.h), driven by `ditserve-cli generate --image a.png --image b.png
// --negative-prompt " "`: every degree gives the same image, the text encoder sharded or on rank
// 0; without a size the output takes about 1024 x 1024 at the last image's aspect ratio; the
// images are used in order; ModelInfo says what the model takes; a Qwen-Image-Edit-2511 folder
// (zero_cond_t) serves at every degree; no image, too many images and a
// bad image are INVALID_ARGUMENT naming the field, and the group serves on. Parity with diffusers'
// QwenImageEditPlusPipeline is qwen_edit_parity_e2e_test's (tests/fixtures/qwen-edit).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "sharding/torch_tensor.h"
#include "tests/support/cli_generate.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixtures.h"
#include "tests/support/qwen_edit_tiny_folder.h"
#include "tests/support/server_process.h"
#include "tests/support/smooth_images.h"

namespace ditserve::testing {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "ditserve-qwen-edit-e2e-" + std::to_string(::getpid()) + "-" + name;
}

const std::string& EditFolder() {
  static const std::string dir = [] {
    absl::StatusOr<std::string> written = WriteQwenEditTinyFolder(TempPath("model"), 11);
    EXPECT_TRUE(written.ok()) << written.status();
    return TempPath("model");
  }();
  return dir;
}

// A seeded smooth RGB image written as PNG.
std::string WritePng(const std::string& name, int width, int height, uint64_t seed) {
  return WriteSmoothPng(TempPath(name), width, height, seed);
}

// The same tiny model as a QwenImageEditPipeline (Qwen-Image-Edit) folder.
const std::string& EditV1Folder() {
  static const std::string dir = [] {
    absl::StatusOr<std::string> written =
        WriteQwenEditTinyFolder(TempPath("model-v1"), 11, "QwenImageEditPipeline");
    EXPECT_TRUE(written.ok()) << written.status();
    return TempPath("model-v1");
  }();
  return dir;
}

// The same tiny model as a Qwen-Image-Edit-2511 folder: the transformer's zero_cond_t on.
const std::string& Edit2511Folder() {
  static const std::string dir = [] {
    const std::string d = TempPath("model-2511");
    absl::StatusOr<std::string> written = WriteQwenEditTinyFolder(d, 11);
    EXPECT_TRUE(written.ok()) << written.status();
    nlohmann::json config;
    std::ifstream(d + "/transformer/config.json") >> config;
    config["zero_cond_t"] = true;
    std::ofstream(d + "/transformer/config.json") << config.dump(2);
    return d;
  }();
  return dir;
}

ServerPool* const servers =
    static_cast<ServerPool*>(::testing::AddGlobalTestEnvironment(new ServerPool()));

ServerProcess* ServerFor(int workers, const std::string& placement = "auto") {
  return servers->Get({"--model", EditFolder(), "--spawn-workers", std::to_string(workers),
                       "--text-encoder-placement", placement, "--log-level", "info"});
}

// The edit request of these tests, with `extra` flags after it.
std::vector<std::string> EditFlags(const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {
      "--prompt", "make the cat wear a red hat", "--negative-prompt", " ", "--seed", "7", "--steps",
      "2"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

ProcessResult RunCli(ServerProcess* server, std::vector<std::string> extra,
                     const std::string& out) {
  return RunCliGenerate(*server, EditFlags(extra), out);
}

// The image (H, W, 3) float32 of a generate that must succeed.
torch::Tensor Generate(ServerProcess* server, std::vector<std::string> extra,
                       const std::string& out) {
  return CliGenerateImage(*server, EditFlags(extra), out);
}

TEST(QwenEditE2E, ModelInfoSaysItTakesOneToThreeImages) {
  ServerProcess* one = ServerFor(1);
  ASSERT_NE(one, nullptr);
  auto stub = v1::ImageGeneration::NewStub(one->Channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  const v1::ImageInputs& in = info.inputs().image_inputs();
  EXPECT_EQ(info.family(), "qwenimage");
  EXPECT_EQ(in.use(), "qwen_edit");
  EXPECT_EQ(in.min_images(), 1u);
  EXPECT_EQ(in.max_images(), 3u);
  EXPECT_EQ(in.size_multiple(), 32u);
  EXPECT_EQ(in.max_aspect_ratio(), 100u);
}

TEST(QwenEditE2E, TwoImagesWithANegativePromptAtEveryDegree) {
  ServerProcess* one = ServerFor(1);
  ServerProcess* sharded = ServerFor(2, "sharded");
  ServerProcess* rank0 = ServerFor(2, "rank0");
  ASSERT_NE(one, nullptr);
  ASSERT_NE(sharded, nullptr);
  ASSERT_NE(rank0, nullptr);
  const std::string a = WritePng("a.png", 45, 61, 1);
  const std::string b = WritePng("b.png", 80, 36, 2);
  const std::vector<std::string> extra = {"--image", a,         "--image", b, "--height",
                                          "100",     "--width", "140"};  // floored to 96 x 128
  torch::Tensor x1 = Generate(one, extra, TempPath("tp1.safetensors"));
  torch::Tensor x2 = Generate(sharded, extra, TempPath("tp2-sharded.safetensors"));
  torch::Tensor x3 = Generate(rank0, extra, TempPath("tp2-rank0.safetensors"));
  ASSERT_TRUE(x1.defined() && x2.defined() && x3.defined());
  EXPECT_EQ(x1.sizes(), (std::vector<int64_t>{96, 128, 3}));
  const double degrees = std::max(RelativeError(x2, x1), RelativeError(x3, x1));
  EXPECT_LT(degrees, 1e-5);
  // The images are used, in order.
  torch::Tensor swapped =
      Generate(sharded, {"--image", b, "--image", a, "--height", "100", "--width", "140"},
               TempPath("swapped.safetensors"));
  ASSERT_TRUE(swapped.defined());
  EXPECT_GT(RelativeError(swapped, x2), 20 * std::max(degrees, 1e-7)) << "tp 2 vs 1: " << degrees;
}

// The Python client (Debian's python3-grpcio) with --image gives the CLI's image.
TEST(QwenEditE2E, PythonClientGivesTheClisImage) {
  if (!ProgramExists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  ServerProcess* two = ServerFor(2, "sharded");
  ASSERT_NE(two, nullptr);
  const std::string a = WritePng("py-a.png", 45, 61, 1);
  const std::string b = WritePng("py-b.png", 80, 36, 2);
  const std::vector<std::string> images = {"--image",  a,    "--image", b,
                                           "--height", "96", "--width", "128"};
  torch::Tensor cli = Generate(two, images, TempPath("cli.safetensors"));
  ASSERT_TRUE(cli.defined());
  const std::string out = TempPath("py.safetensors");
  std::vector<std::string> args = {
      "/usr/bin/python3",
      std::string(DITSERVE_SOURCE_DIR) + "/deploy/clients/python/ditserve_client.py",
      "--stubs",
      BinaryDir() + "/python",
      "generate",
      "--server",
      two->address(),
      "--prompt",
      "make the cat wear a red hat",
      "--negative-prompt",
      " ",
      "--seed",
      "7",
      "--steps",
      "2",
      "--format",
      "raw",
      "--quiet",
      "-o",
      out};
  args.insert(args.end(), images.begin(), images.end());
  ProcessResult r = RunProcess(args, {}, 300);
  if (r.exit_code != 0 && r.err.find("No module named 'grpc'") != std::string::npos) {
    GTEST_SKIP() << "python3-grpcio is not installed";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto tensors = sharding::ReadAllTensors(out);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_TRUE(torch::equal(tensors->at("image"), cli));
  // A file that cannot be read is a usage error: nothing is sent.
  std::replace(args.begin(), args.end(), b, TempPath("missing.png"));
  ProcessResult missing = RunProcess(args, {}, 60);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("--image"), std::string::npos) << missing.err;
}

TEST(QwenEditE2E, QwenImageEditTakesOneImageAtEveryDegree) {
  ServerProcess* one = servers->Get({"--model", EditV1Folder(), "--spawn-workers", "1"});
  ServerProcess* two = servers->Get(
      {"--model", EditV1Folder(), "--spawn-workers", "2", "--text-encoder-placement", "sharded"});
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  auto stub = v1::ImageGeneration::NewStub(one->Channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.inputs().image_inputs().max_images(), 1u);
  EXPECT_EQ(info.inputs().image_inputs().condition_area(), 1024u * 1024u);
  const std::string a = WritePng("v1-a.png", 45, 61, 1);
  const std::vector<std::string> extra = {"--image", a, "--height", "96", "--width", "128"};
  torch::Tensor x1 = Generate(one, extra, TempPath("v1-tp1.safetensors"));
  torch::Tensor x2 = Generate(two, extra, TempPath("v1-tp2.safetensors"));
  ASSERT_TRUE(x1.defined() && x2.defined());
  EXPECT_LT(RelativeError(x2, x1), 1e-5);
  ProcessResult r = RunCli(two, {"--image", a, "--image", a}, TempPath("v1-two.safetensors"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("at most 1 input image"), std::string::npos) << r.err;
}

// Qwen-Image-Edit-2511 (zero_cond_t) serves at every degree, and the switch reaches the model: the
// same weights and request without it (the -2509 folder) give another image.
TEST(QwenEditE2E, QwenImageEdit2511ServesAtEveryDegree) {
  ServerProcess* one = servers->Get({"--model", Edit2511Folder(), "--spawn-workers", "1"});
  ServerProcess* two = servers->Get(
      {"--model", Edit2511Folder(), "--spawn-workers", "2", "--text-encoder-placement", "sharded"});
  ServerProcess* plus = ServerFor(1);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  ASSERT_NE(plus, nullptr);
  const std::string a = WritePng("2511-a.png", 45, 61, 1);
  const std::string b = WritePng("2511-b.png", 80, 36, 2);
  const std::vector<std::string> extra = {"--image",  a,    "--image", b,
                                          "--height", "64", "--width", "96"};
  torch::Tensor x1 = Generate(one, extra, TempPath("2511-tp1.safetensors"));
  torch::Tensor x2 = Generate(two, extra, TempPath("2511-tp2.safetensors"));
  torch::Tensor x2509 = Generate(plus, extra, TempPath("2511-as-2509.safetensors"));
  ASSERT_TRUE(x1.defined() && x2.defined() && x2509.defined());
  const double degrees = RelativeError(x2, x1);
  EXPECT_LT(degrees, 1e-5);
  EXPECT_GT(RelativeError(x1, x2509), 20 * std::max(degrees, 1e-7));
}

TEST(QwenEditE2E, WithoutASizeTheOutputFollowsTheLastImage) {
  ServerProcess* two = ServerFor(2, "sharded");
  ASSERT_NE(two, nullptr);
  const std::string a = WritePng("size-a.png", 64, 64, 3);
  const std::string wide = WritePng("size-wide.png", 80, 36, 4);
  // calculate_dimensions(1024 * 1024, 80 / 36): 1536 x 672.
  torch::Tensor x =
      Generate(two, {"--image", a, "--image", wide, "--steps", "1"}, TempPath("sized.safetensors"));
  ASSERT_TRUE(x.defined());
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{672, 1536, 3}));
}

TEST(QwenEditE2E, RefusalsNameTheFieldAndTheGroupServesOn) {
  ServerProcess* two = ServerFor(2, "sharded");
  ASSERT_NE(two, nullptr);
  const std::string a = WritePng("r-a.png", 40, 40, 5);
  const std::string tall = WritePng("r-tall.png", 2, 300, 6);
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{}, "needs at least 1 input image"},
      {{"--image", a, "--image", a, "--image", a, "--image", a}, "at most 3 input images"},
      {{"--image", a, "--image", tall}, "images[1]"},
      {{"--image", a, "--strength", "0.5"}, "strength"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--height", "64", "--width", "64"});
    ProcessResult r = RunCli(two, args, TempPath("refused.safetensors"));
    EXPECT_NE(r.exit_code, 0) << c.says;
    EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  torch::Tensor after = Generate(two, {"--image", a, "--height", "64", "--width", "64"},
                                 TempPath("after.safetensors"));
  EXPECT_TRUE(after.defined());
}

}  // namespace
}  // namespace ditserve::testing
