// Image inputs through the real binaries: ditserve-frontend with 1 and with 2 spawned CPU workers
// (Gloo), driven by ditserve-cli with --image (and --strength), on the fixture pipelines whose
// VAEs have their encoders: FLUX.2 editing with two reference images (flux2-tiny) and FLUX.1
// image-to-image (flux1-tiny). Every degree gives the same image; ModelInfo says what each model
// takes; a bad image is INVALID_ARGUMENT naming it and leaves the group serving. Parity of these
// paths with diffusers is image_inputs_parity_test's (in-process) until the GPU host makes
// tests/fixtures/image-inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "sharding/torch_tensor.h"
#include "tests/support/cli_generate.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixtures.h"
#include "tests/support/server_process.h"
#include "tests/support/smooth_images.h"

namespace ditserve::testing {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "ditserve-image-e2e-" + std::to_string(::getpid()) + "-" + name;
}

// A seeded smooth RGB image written as PNG.
std::string WritePng(const std::string& name, int width, int height, uint64_t seed) {
  return WriteSmoothPng(TempPath(name), width, height, seed);
}

// The servers the tests start (one per model and worker count), stopped when the tests end.
ServerPool* const servers =
    static_cast<ServerPool*>(::testing::AddGlobalTestEnvironment(new ServerPool()));

ServerProcess* ServerFor(const std::string& model, int workers) {
  return servers->Get({"--model", FixturesDir() + "/" + model, "--spawn-workers",
                       std::to_string(workers), "--log-level", "info"});
}

// `ditserve-cli generate ... --format raw` → the image (H, W, 3) float32.
torch::Tensor Generate(ServerProcess* server, std::vector<std::string> extra,
                       const std::string& out) {
  std::vector<std::string> flags = {"--prompt", "make it a painting", "--seed", "42"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return CliGenerateImage(*server, flags, out);
}

v1::ImageInputs InputsOf(ServerProcess* server) {
  auto stub = v1::ImageGeneration::NewStub(server->Channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  EXPECT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  return info.inputs().image_inputs();
}

TEST(ImageInputsE2E, Flux2EditsWithTwoReferencesAtEveryDegree) {
  ServerProcess* one = ServerFor("flux2-tiny", 1);
  ServerProcess* two = ServerFor("flux2-tiny", 2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  const v1::ImageInputs in = InputsOf(two);
  EXPECT_EQ(in.use(), "reference");
  EXPECT_EQ(in.max_images(), 10u);
  EXPECT_EQ(in.min_side(), 64u);
  const std::string a = WritePng("ref-a.png", 96, 64, 1);
  const std::string b = WritePng("ref-b.png", 70, 90, 2);  // cropped to 68 x 88
  const std::vector<std::string> extra = {"--image",
                                          a,
                                          "--image",
                                          b,
                                          "--height",
                                          "32",
                                          "--width",
                                          "48",
                                          "--steps",
                                          "2",
                                          "--guidance",
                                          "4",
                                          "--max-sequence-length",
                                          "64"};
  torch::Tensor x1 = Generate(one, extra, TempPath("flux2-tp1.safetensors"));
  torch::Tensor x2 = Generate(two, extra, TempPath("flux2-tp2.safetensors"));
  ASSERT_TRUE(x1.defined() && x2.defined());
  EXPECT_EQ(x1.sizes(), (std::vector<int64_t>{32, 48, 3}));
  const double degrees = RelativeError(x2, x1);
  EXPECT_LT(degrees, 1e-5);
  // The references are used, in order (the tiny model's 2 steps move the image a little).
  torch::Tensor swapped =
      Generate(two,
               {"--image", b, "--image", a, "--height", "32", "--width", "48", "--steps", "2",
                "--guidance", "4", "--max-sequence-length", "64"},
               TempPath("flux2-swapped.safetensors"));
  const double swap = RelativeError(swapped, x2);
  EXPECT_GT(swap, 1e-6);
  EXPECT_GT(swap, 20 * degrees) << "tp 2 vs 1: " << degrees;
  // No size: the first reference's prepared size.
  torch::Tensor sized = Generate(two, {"--image", a, "--steps", "1", "--max-sequence-length", "64"},
                                 TempPath("flux2-sized.safetensors"));
  EXPECT_EQ(sized.sizes(), (std::vector<int64_t>{64, 96, 3}));
}

TEST(ImageInputsE2E, Flux1ImageToImageAtEveryDegree) {
  ServerProcess* one = ServerFor("flux1-tiny", 1);
  ServerProcess* two = ServerFor("flux1-tiny", 2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  const v1::ImageInputs in = InputsOf(one);
  EXPECT_EQ(in.use(), "image_to_image");
  EXPECT_EQ(in.max_images(), 1u);
  EXPECT_DOUBLE_EQ(in.default_strength(), 0.6);
  const std::string init = WritePng("init.png", 50, 40, 3);  // resized to 32 x 32
  const std::vector<std::string> extra = {"--image",
                                          init,
                                          "--strength",
                                          "0.6",
                                          "--height",
                                          "32",
                                          "--width",
                                          "32",
                                          "--steps",
                                          "5",
                                          "--max-sequence-length",
                                          "32"};
  torch::Tensor x1 = Generate(one, extra, TempPath("flux1-tp1.safetensors"));
  torch::Tensor x2 = Generate(two, extra, TempPath("flux1-tp2.safetensors"));
  ASSERT_TRUE(x1.defined() && x2.defined());
  EXPECT_LT(RelativeError(x2, x1), 1e-5);
}

TEST(ImageInputsE2E, ABadImageIsRefusedNamingItAndTheGroupServesOn) {
  ServerProcess* two = ServerFor("flux2-tiny", 2);
  ASSERT_NE(two, nullptr);
  const std::string good = WritePng("good.png", 64, 64, 4);
  const std::string truncated = TempPath("truncated.png");
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  ProcessResult r = RunProcess(
      {BinaryDir() + "/cli/ditserve-cli", "generate", "--server", two->address(), "--prompt", "x",
       "--image", good, "--image", truncated, "--steps", "1", "-o", TempPath("bad.png")},
      {}, 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("images[1]"), std::string::npos) << r.err;
  torch::Tensor after =
      Generate(two, {"--image", good, "--steps", "1", "--max-sequence-length", "64"},
               TempPath("after.safetensors"));
  EXPECT_TRUE(after.defined());
}

}  // namespace
}  // namespace ditserve::testing
