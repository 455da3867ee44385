// Qwen-Image-Edit against diffusers through the real binaries (issue 34's end-to-end parity, as
// image_inputs_parity_e2e_test is issue 30's): each call of tests/fixtures/qwen-edit (made by the
// real diffusers + transformers, make_qwen_edit_fixtures.py; tests/fixtures/QWEN_EDIT.md) goes
// from the saved input PNGs through `ditserve-cli generate --image ... --negative-prompt ...
// --true-cfg-scale ... --format raw` to ditserve-frontend with 1 and with 2 spawned CPU workers
// (Gloo; at 2 the text encoder sharded), float32:
//
//   - edit_one, edit_two: QwenImageEditPlusPipeline on qwen-edit/qwenimage-edit-tiny/ (one image;
//     two images in order), the requested size floored by the frontend;
//   - edit_v1: QwenImageEditPipeline on qwen-edit/qwenimage-edit-v1-tiny/ (one image, its ~1024²
//     resize feeding both encoders, the bare vision block);
//   - img2img: QwenImageImg2ImgPipeline on qwenimage-tiny/ with --strength.
//
// The image the CLI writes is within 1e-3 of diffusers' (the in-process qwen_edit_parity_test's
// tolerance) and tp 2 within 1e-5 of tp 1; ModelInfo says what the frontend prepares the images
// for. The in-process test also checks every stage (pixels, tokens, positions, vision tower,
// embeddings, latents); this one proves the wire path: the bytes as sent, the frontend's checks
// and preparation (condition area from the model), and the workers' decoding. An edit call whose
// diffusers text model did not run with 3-D M-RoPE positions (position_ids_kind) is skipped, as in
// the in-process test. Registered only once the fixtures exist (REQUIRES); always built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "sharding/torch_tensor.h"
#include "tests/support/cli_generate.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixtures.h"
#include "tests/support/qwen_edit_calls.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

// The servers the test starts (one per call's folder and worker count), stopped when it ends.
ServerPool* const servers =
    static_cast<ServerPool*>(::testing::AddGlobalTestEnvironment(new ServerPool()));

ServerProcess* ServerFor(const std::string& folder, int workers) {
  std::vector<std::string> flags = {
      "--model", folder,    "--spawn-workers", std::to_string(workers),
      "--dtype", "float32", "--log-level",     "info"};
  if (workers > 1) flags.insert(flags.end(), {"--text-encoder-placement", "sharded"});
  return servers->Get(flags);
}

// A JSON number as diffusers got it (nlohmann writes the shortest form that reads back exactly).
std::string Number(const nlohmann::json& v) {
  return v.dump();
}

// The call's arguments as ditserve-cli flags (a size, a negative prompt, a true CFG scale, a
// strength and a max_sequence_length only where diffusers was given one).
std::vector<std::string> CallFlags(const nlohmann::json& call) {
  const nlohmann::json& args = call["args"];
  std::vector<std::string> flags = {
      "--prompt", args["prompt"].get<std::string>(),
      "--seed",   std::to_string(call["seed"].get<uint64_t>()),
      "--steps",  std::to_string(args["num_inference_steps"].get<int64_t>())};
  if (args.contains("negative_prompt") && args["negative_prompt"].is_string()) {
    flags.insert(flags.end(), {"--negative-prompt", args["negative_prompt"].get<std::string>()});
  }
  if (args.contains("true_cfg_scale")) {
    flags.insert(flags.end(), {"--true-cfg-scale", Number(args["true_cfg_scale"])});
  }
  if (args.contains("height")) {
    flags.insert(flags.end(), {"--height", std::to_string(args["height"].get<int64_t>()), "--width",
                               std::to_string(args["width"].get<int64_t>())});
  }
  if (args.contains("strength")) {
    flags.insert(flags.end(), {"--strength", Number(args["strength"])});
  }
  if (args.contains("max_sequence_length")) {
    flags.insert(flags.end(), {"--max-sequence-length",
                               std::to_string(args["max_sequence_length"].get<int64_t>())});
  }
  for (const auto& name : call["images"]) {
    flags.insert(flags.end(), {"--image", QwenEditDir() + "/inputs/" + name.get<std::string>()});
  }
  return flags;
}

// `ditserve-cli generate ... --format raw` -> the image (H, W, 3) float32.
torch::Tensor Generate(ServerProcess* server, const nlohmann::json& call, const std::string& tag) {
  const std::string out = ::testing::TempDir() + "ditserve-qwen-edit-parity-e2e-" +
                          std::to_string(::getpid()) + "-" + tag + ".safetensors";
  torch::Tensor image = CliGenerateImage(*server, CallFlags(call), out);
  ::unlink(out.c_str());
  return image;
}

// ModelInfo's image inputs: what the frontend prepares the call's images for.
void ExpectImageInputs(ServerProcess* server, const nlohmann::json& call) {
  auto stub = v1::ImageGeneration::NewStub(server->Channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  grpc::Status s = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const v1::ImageInputs& in = info.inputs().image_inputs();
  const std::string pipeline = call["pipeline"].get<std::string>();
  if (pipeline == "QwenImageImg2ImgPipeline") {
    EXPECT_EQ(in.use(), "image_to_image");
    return;
  }
  EXPECT_EQ(in.use(), "qwen_edit");
  EXPECT_EQ(static_cast<int64_t>(in.condition_area()), QwenEditCallConditionArea(call));
  EXPECT_EQ(in.max_images(), IsQwenEditV1Call(call) ? 1u : 3u);
}

class QwenEditParityE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(QwenEditParityE2E, TheCliGetsDiffusersImageAtEveryDegree) {
  const std::string name = GetParam();
  const nlohmann::json& call = QwenEditCall(name);
  ASSERT_TRUE(call.is_object()) << name << " is not in qwen_edit_calls.json";
  if (call["pipeline"].get<std::string>() != "QwenImageImg2ImgPipeline") {
    const std::string kind = QwenEditResult(name).value("position_ids_kind", std::string("?"));
    if (kind != "mrope3d") {
      GTEST_SKIP() << name << ": diffusers' text model did not run with the 3-D M-RoPE positions "
                   << "(position_ids_kind " << kind << "), which ours always uses";
    }
  }
  const torch::Tensor expected = QwenEditRef(name + ".image");
  ASSERT_TRUE(expected.defined());
  const std::string folder = QwenEditCallFolder(call);
  torch::Tensor tp1;
  for (const int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    ServerProcess* server = ServerFor(folder, workers);
    ASSERT_NE(server, nullptr);
    ExpectImageInputs(server, call);
    const torch::Tensor image = Generate(server, call, name + "-tp" + std::to_string(workers));
    ASSERT_TRUE(image.defined());
    ASSERT_EQ(image.sizes(), expected.sizes()) << name << " tp " << workers;
    const double err = RelativeError(image, expected);
    std::printf("%s through the CLI, tp %d: relative error %.3g against diffusers\n", name.c_str(),
                workers, err);
    EXPECT_LT(err, 1e-3) << name << " tp " << workers;
    if (workers == 1) {
      tp1 = image;
    } else {
      EXPECT_LT(RelativeError(image, tp1), 1e-5) << name << ": tp 2 against tp 1";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Calls, QwenEditParityE2E,
                         ::testing::Values("edit_one", "edit_two", "edit_v1", "edit_2511",
                                           "img2img"));

}  // namespace
}  // namespace ditserve::testing
