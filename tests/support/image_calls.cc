#include "tests/support/image_calls.h"

#include <gtest/gtest.h>

#include <mutex>
#include <utility>

#include "comm/local_communicator.h"
#include "common/status_macros.h"
#include "imaging/decode.h"
#include "imaging/preprocess.h"
#include "sharding/torch_tensor.h"
#include "tests/support/image_fixtures.h"

namespace ditserve::testing {
namespace {

torch::Tensor ToTensor(const imaging::RgbImage& image) {
  return torch::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3},
                          torch::kUInt8)
      .clone();
}

}  // namespace

absl::StatusOr<std::vector<torch::Tensor>> PrepareImageCallInputs(const nlohmann::json& call,
                                                                  const pipeline::ModelCard& card,
                                                                  int64_t height, int64_t width) {
  using pipeline::ImageUse;
  const pipeline::ImageInputCard& in = card.image_inputs;
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

pipeline::GenerationJob ImageCallJob(const nlohmann::json& call,
                                     std::vector<torch::Tensor> images) {
  const nlohmann::json& args = call["args"];
  pipeline::GenerationJob job;
  job.height = args.value("height", int64_t{0});
  job.width = args.value("width", int64_t{0});
  if (job.height == 0 && !images.empty()) {  // diffusers' FLUX.2: the first reference's size
    job.height = images[0].size(0);
    job.width = images[0].size(1);
  }
  job.num_inference_steps = args["num_inference_steps"].get<int64_t>();
  job.max_sequence_length = args["max_sequence_length"].get<int64_t>();
  pipeline::JobItem item;
  item.prompt = item.prompt_2 = args["prompt"].get<std::string>();
  item.seed = call["seed"].get<uint64_t>();
  item.guidance_scale = args["guidance_scale"].get<float>();
  item.strength = args.value("strength", 0.0);
  item.images = std::move(images);
  job.items.push_back(std::move(item));
  return job;
}

absl::StatusOr<ImageCallOutcome> RunImageCall(const std::string& name, int world,
                                              pipeline::PipelineOptions options) {
  const nlohmann::json& call = ImageCalls()["calls"][name];
  const nlohmann::json& args = call["args"];
  options.model_dir = AssembleImagePipeline(name);
  std::mutex mu;
  ImageCallOutcome out;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> p, pipeline::LoadPipeline(options, &c));
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> images,
                     PrepareImageCallInputs(call, p->Card(), args.value("height", int64_t{0}),
                                            args.value("width", int64_t{0})));
    pipeline::GenerationJob job = ImageCallJob(call, images);
    ASSIGN_OR_RETURN(pipeline::GenerationResult r, p->Run(job, nullptr, [] { return false; }));
    if (c.rank() != 0) return absl::OkStatus();
    if (r.images.empty()) return absl::InternalError("rank 0 returned no image");
    std::lock_guard<std::mutex> lock(mu);
    out.card = p->Card();
    out.image = r.images.at(0);
    out.prepared = std::move(images);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

const std::map<std::string, torch::Tensor>& ImageReferenceBf16() {
  static const auto* ref = [] {
    auto* tensors = new std::map<std::string, torch::Tensor>();
    auto all = sharding::ReadAllTensors(ImageFixturesDir() + "/image_reference_bf16.safetensors");
    if (!all.ok()) {
      ADD_FAILURE() << all.status();
      return tensors;
    }
    for (auto& [name, t] : *all) (*tensors)[name] = t.to(torch::kFloat32);
    return tensors;
  }();
  return *ref;
}

torch::Tensor ImageRefBf16(const std::string& name) {
  const auto& ref = ImageReferenceBf16();
  auto it = ref.find(name);
  if (it == ref.end()) {
    ADD_FAILURE() << "image_reference_bf16.safetensors has no tensor " << name;
    return {};
  }
  return it->second;
}

}  // namespace ditserve::testing
