// The image-input fixture calls (image_fixtures.h) run the way ditserve runs them: a call's input
// files decoded and prepared by imaging/ for the loaded model's card (what the frontend does before
// admission, server/input_images), the job built from the call's arguments as
// make_image_fixtures.py passes them to diffusers, and the pipeline run on in-process ranks on the
// chosen device and dtype. Shared by image_inputs_parity_test (CPU, float32, tp 1 and 2) and
// image_inputs_gpu_test (CUDA, float32 and bfloat16), so both hold the same preparation path
// against diffusers.
//
// Thread-safety: as image_fixtures.h (call from tests); RunImageCall runs its ranks on threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "pipeline/job.h"
#include "pipeline/pipeline.h"

namespace ditserve::testing {

// The images of `call` (an entry of ImageCalls()["calls"]) as the frontend prepares them for
// `card`: decoded (imaging::DecodeImage), checked and resized by the card's rule (FLUX.2
// references, FLUX.1 image to image at the request's `height` x `width`, Kontext); uint8
// (H, W, 3) CPU tensors, in order.
absl::StatusOr<std::vector<torch::Tensor>> PrepareImageCallInputs(const nlohmann::json& call,
                                                                  const pipeline::ModelCard& card,
                                                                  int64_t height, int64_t width);

// The job of `call` with its prepared `images`: prompt, seed, steps, guidance, strength and size as
// the call's arguments say; no size: the first image's (diffusers' FLUX.2).
pipeline::GenerationJob ImageCallJob(const nlohmann::json& call, std::vector<torch::Tensor> images);

struct ImageCallOutcome {
  pipeline::ModelCard card;
  torch::Tensor image;                  // rank 0's (H, W, 3), float in [0, 1]
  std::vector<torch::Tensor> prepared;  // PrepareImageCallInputs' images
};

// Runs call `name` (a key of ImageCalls()["calls"]) through its assembled pipeline folder
// (AssembleImagePipeline) on `world` in-process ranks (comm::RunLocalGroup), each loading it with
// `options` (its model_dir is replaced by the assembled folder): device, dtype, weights.
absl::StatusOr<ImageCallOutcome> RunImageCall(const std::string& name, int world,
                                              pipeline::PipelineOptions options = {});

// image_reference_bf16.safetensors (make_image_fixtures.py --bf16-device cuda: diffusers' bfloat16
// run of each call on the GPU, `<call>.bf16.image`), every tensor as float32; empty, with a test
// failure, when the file is absent.
const std::map<std::string, torch::Tensor>& ImageReferenceBf16();
// One of them; ADD_FAILURE and an empty tensor when absent.
torch::Tensor ImageRefBf16(const std::string& name);

}  // namespace ditserve::testing
