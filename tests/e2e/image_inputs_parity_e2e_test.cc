// Image inputs against diffusers through the real binaries (issue 30's end-to-end parity): each
// call of tests/fixtures/image-inputs (made by the real diffusers, make_image_fixtures.py: FLUX.2
// editing with one reference and with two of odd sizes, FLUX.1 image to image at strength 0.6, a
// FLUX.1 Kontext call) goes from the committed input files through ditserve-cli generate --image to
// ditserve-frontend with 1 and with 2 spawned CPU workers (Gloo), float32; the image the CLI writes
// (--format raw) is within 1e-3 of diffusers' and tp 2 within 1e-5 of tp 1. The in-process parity
// test (image_inputs_parity_test) also checks the prepared pixels; this one proves the wire path:
// the bytes as sent, the frontend's checks and the workers' decoding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sharding/torch_tensor.h"
#include "tests/support/cli_generate.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixtures.h"
#include "tests/support/image_fixtures.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

// The servers the test starts (one per call's folder and worker count), stopped when it ends.
ServerPool* const servers =
    static_cast<ServerPool*>(::testing::AddGlobalTestEnvironment(new ServerPool()));

ServerProcess* ServerFor(const std::string& folder, int workers) {
  return servers->Get({"--model", folder, "--spawn-workers", std::to_string(workers), "--dtype",
                       "float32", "--log-level", "info"});
}

// The call's arguments as ditserve-cli flags (a size only where diffusers was given one).
std::vector<std::string> CallFlags(const nlohmann::json& call) {
  const nlohmann::json& args = call["args"];
  std::vector<std::string> flags = {"--prompt",
                                    args["prompt"].get<std::string>(),
                                    "--seed",
                                    std::to_string(call["seed"].get<uint64_t>()),
                                    "--steps",
                                    std::to_string(args["num_inference_steps"].get<int64_t>()),
                                    "--guidance",
                                    std::to_string(args["guidance_scale"].get<double>()),
                                    "--max-sequence-length",
                                    std::to_string(args["max_sequence_length"].get<int64_t>())};
  if (args.contains("height")) {
    flags.insert(flags.end(), {"--height", std::to_string(args["height"].get<int64_t>()), "--width",
                               std::to_string(args["width"].get<int64_t>())});
  }
  if (args.contains("strength")) {
    flags.insert(flags.end(), {"--strength", std::to_string(args["strength"].get<double>())});
  }
  for (const auto& name : call["images"]) {
    flags.insert(flags.end(),
                 {"--image", ImageFixturesDir() + "/inputs/" + name.get<std::string>()});
  }
  return flags;
}

// `ditserve-cli generate ... --format raw` -> the image (H, W, 3) float32.
torch::Tensor Generate(ServerProcess* server, const nlohmann::json& call, const std::string& tag) {
  const std::string out = ::testing::TempDir() + "ditserve-image-parity-e2e-" +
                          std::to_string(::getpid()) + "-" + tag + ".safetensors";
  torch::Tensor image = CliGenerateImage(*server, CallFlags(call), out);
  ::unlink(out.c_str());
  return image;
}

class ImageInputsParityE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageInputsParityE2E, TheCliGetsDiffusersImageAtEveryDegree) {
  const std::string name = GetParam();
  const nlohmann::json& call = ImageCalls()["calls"][name];
  ASSERT_TRUE(call.is_object()) << name << " is not in image_calls.json";
  const std::string folder = AssembleImagePipeline(name);
  const torch::Tensor expected = ImageRef(name + ".image");
  ASSERT_TRUE(expected.defined());
  torch::Tensor tp1;
  for (const int workers : {1, 2}) {
    ServerProcess* server = ServerFor(folder, workers);
    ASSERT_NE(server, nullptr);
    const torch::Tensor image = Generate(server, call, name + "-tp" + std::to_string(workers));
    ASSERT_TRUE(image.defined());
    ASSERT_EQ(image.sizes(), expected.sizes()) << name << " tp " << workers;
    const double err = RelativeError(image, expected);
    std::printf("%s through the CLI, tp %d: relative error %.3g against diffusers\n", name.c_str(),
                workers, err);
    EXPECT_LT(err, 1e-3) << name << " tp " << workers;
    if (workers == 1)
      tp1 = image;
    else
      EXPECT_LT(RelativeError(image, tp1), 1e-5) << name << ": tp 2 against tp 1";
  }
}

INSTANTIATE_TEST_SUITE_P(Calls, ImageInputsParityE2E,
                         ::testing::Values("flux2_edit_one", "flux2_edit_two", "flux1_img2img",
                                           "flux1_kontext"));

}  // namespace
}  // namespace ditserve::testing
