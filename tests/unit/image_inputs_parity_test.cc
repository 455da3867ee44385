// Image inputs against diffusers' own runs (tests/fixtures/image-inputs, make_image_fixtures.py):
// each call (FLUX.2 editing with one reference that needs no resampling and with two of odd sizes
// that do; FLUX.1 image-to-image at strength 0.6; a Kontext call) goes from the committed input
// files through our decoding and preparation (imaging/) and the pipeline, at tp 1 and 2 (in-process
// ranks), float32 on the CPU: the prepared pixels (where stored), the VAE side's latents, the
// transformer's first call and the image are compared with diffusers'; tp 2 equals tp 1. The VAE
// encoders alone are vae_encoder_test's.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/local_communicator.h"
#include "common/status_macros.h"
#include "imaging/decode.h"
#include "imaging/preprocess.h"
#include "pipeline/image_inputs.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixtures.h"
#include "tests/support/image_fixtures.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::AssembleImagePipeline;
using ditserve::testing::ImageCalls;
using ditserve::testing::ImageInputBytes;
using ditserve::testing::ImageRef;
using ditserve::testing::RelativeError;

torch::Tensor ToTensor(const imaging::RgbImage& image) {
  return torch::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3},
                          torch::kUInt8)
      .clone();
}

// The call's images as the frontend prepares them for the model's card.
absl::StatusOr<std::vector<torch::Tensor>> Prepare(const nlohmann::json& call,
                                                   const ModelCard& card, int64_t height,
                                                   int64_t width) {
  const ImageInputCard& in = card.image_inputs;
  std::vector<torch::Tensor> out;
  for (const auto& name : call["images"]) {
    ASSIGN_OR_RETURN(imaging::DecodedImage d, imaging::DecodeImage(ImageInputBytes(name)));
    const int multiple = static_cast<int>(in.size_multiple);
    absl::StatusOr<imaging::RgbImage> prepared;
    switch (in.use) {
      case ImageUse::kReference:
        RETURN_IF_ERROR(imaging::CheckImageShape(d.image.width, d.image.height, in.min_side,
                                                 in.max_aspect_ratio));
        prepared = imaging::PrepareReferenceImage(d.image, in.max_area, multiple);
        break;
      case ImageUse::kImageToImage:
        prepared = imaging::PrepareImageToImage(d.image, static_cast<int>(width),
                                                static_cast<int>(height), multiple);
        break;
      case ImageUse::kKontext:
        prepared = imaging::PrepareKontextImage(d.image, multiple);
        break;
      case ImageUse::kNone:
        return absl::FailedPreconditionError("the model takes no image");
    }
    if (!prepared.ok()) return prepared.status();
    out.push_back(ToTensor(*prepared));
  }
  return out;
}

struct Outcome {
  ModelCard card;
  torch::Tensor image;  // rank 0's (H, W, 3)
  std::vector<torch::Tensor> prepared;
};

absl::StatusOr<Outcome> RunCall(const std::string& name, int world) {
  const nlohmann::json& call = ImageCalls()["calls"][name];
  const nlohmann::json& args = call["args"];
  std::mutex mu;
  Outcome out;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = AssembleImagePipeline(name);
    ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> p, LoadPipeline(opts, &c));
    GenerationJob job;
    job.height = args.value("height", int64_t{0});
    job.width = args.value("width", int64_t{0});
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> images,
                     Prepare(call, p->Card(), job.height, job.width));
    if (job.height == 0) {  // diffusers' FLUX.2: the first reference's prepared size
      job.height = images[0].size(0);
      job.width = images[0].size(1);
    }
    job.num_inference_steps = args["num_inference_steps"].get<int64_t>();
    job.max_sequence_length = args["max_sequence_length"].get<int64_t>();
    JobItem item;
    item.prompt = item.prompt_2 = args["prompt"].get<std::string>();
    item.seed = call["seed"].get<uint64_t>();
    item.guidance_scale = args["guidance_scale"].get<float>();
    item.strength = args.value("strength", 0.0);
    item.images = images;
    job.items.push_back(item);
    ASSIGN_OR_RETURN(GenerationResult r, p->Run(job, nullptr, [] { return false; }));
    if (c.rank() != 0) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu);
    out.card = p->Card();
    out.image = r.images.at(0);
    out.prepared = images;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

class ImageInputsParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageInputsParity, MatchesDiffusersAtEveryDegree) {
  const std::string name = GetParam();
  auto one = RunCall(name, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  const nlohmann::json& result = ImageCalls()["results"][name];
  ASSERT_EQ(one->prepared.size(), result["prepared"].size());
  for (size_t i = 0; i < one->prepared.size(); ++i) {
    const torch::Tensor& px = one->prepared[i];
    EXPECT_EQ(px.size(1), result["prepared"][i]["width"].get<int64_t>()) << name << " image " << i;
    EXPECT_EQ(px.size(0), result["prepared"][i]["height"].get<int64_t>()) << name << " image " << i;
    const std::string key = name + ".pixels." + std::to_string(i);
    if (ditserve::testing::ImageReference().count(key) != 0) {
      auto x = VaeImageInput(px, torch::kFloat32, torch::kCPU);
      ASSERT_TRUE(x.ok()) << x.status();
      EXPECT_TRUE(torch::equal(*x, ImageRef(key))) << key << " differs from diffusers' preprocess";
    }
  }
  const torch::Tensor expected = ImageRef(name + ".image");
  ASSERT_EQ(one->image.sizes(), expected.sizes());
  EXPECT_LT(RelativeError(one->image, expected), 1e-3) << name;
  auto two = RunCall(name, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_LT(RelativeError(two->image, one->image), 1e-5) << name;
}

INSTANTIATE_TEST_SUITE_P(Calls, ImageInputsParity,
                         ::testing::Values("flux2_edit_one", "flux2_edit_two", "flux1_img2img",
                                           "flux1_kontext"));

}  // namespace
}  // namespace ditserve::pipeline
