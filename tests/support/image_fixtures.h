// The image-input fixtures: tests/fixtures/image-inputs, made with the real diffusers by
// tests/fixtures/make_image_fixtures.py (its docstring lists what is in them). A call's pipeline
// folder is assembled as that script assembles it: a copy of the base fixture folder (flux1-tiny,
// flux2-tiny) with the call's VAE and, when the call says so, another model_index class.
//
// Thread-safety: the accessors load once (function-local statics); call from tests.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

namespace ditserve::testing {

std::string ImageFixturesDir();  // <fixtures>/image-inputs
// image_calls.json (calls, inputs, prepared sizes, versions).
const nlohmann::json& ImageCalls();
// Every tensor of image_reference.safetensors (float32).
const std::map<std::string, torch::Tensor>& ImageReference();
// One of them; ADD_FAILURE and an empty tensor when absent.
torch::Tensor ImageRef(const std::string& name);
// The pipeline folder of `call` (a key of ImageCalls()["calls"]), assembled once per process in a
// temporary folder that is removed at exit.
std::string AssembleImagePipeline(const std::string& call);
// The bytes of an input image (image-inputs/inputs/<name>).
std::string ImageInputBytes(const std::string& name);

}  // namespace ditserve::testing
