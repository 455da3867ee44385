#include "tests/support/qwen_edit_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/decode.h"
#include "imaging/preprocess.h"
#include "imaging/qwen_edit_sizes.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

// Every tensor of qwen-edit/<file>, loaded once (empty when the file cannot be read).
const std::map<std::string, torch::Tensor>& Tensors(const std::string& file, bool report) {
  static auto* loaded = new std::map<std::string, std::map<std::string, torch::Tensor>>();
  auto it = loaded->find(file);
  if (it != loaded->end()) return it->second;
  std::map<std::string, torch::Tensor>& out = (*loaded)[file];
  auto all = sharding::ReadAllTensors(QwenEditDir() + "/" + file);
  if (all.ok()) {
    out = *std::move(all);
  } else if (report) {
    ADD_FAILURE() << all.status();
  }
  return out;
}

const std::string& ReferenceFile(const std::string& key) {
  static const std::string f32 = "qwen_edit_reference.safetensors";
  static const std::string bf16 = "qwen_edit_reference_bf16.safetensors";
  return key.find(".bf16.") != std::string::npos ? bf16 : f32;
}

const nlohmann::json& Null() {
  static const nlohmann::json null;
  return null;
}

}  // namespace

std::string QwenEditDir() {
  return FixturesDir() + "/qwen-edit";
}
std::string QwenEditFolder() {
  return QwenEditDir() + "/qwenimage-edit-tiny";
}

const nlohmann::json& QwenEditDoc() {
  static const nlohmann::json doc = [] {
    std::ifstream in(QwenEditDir() + "/qwen_edit_calls.json");
    nlohmann::json all = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (all.is_discarded() || !all.is_object() || !all.contains("calls")) {
      ADD_FAILURE() << "qwen-edit/qwen_edit_calls.json is missing or has no calls";
      return nlohmann::json();
    }
    return all;
  }();
  return doc;
}

const nlohmann::json& QwenEditCall(const std::string& name) {
  const nlohmann::json& doc = QwenEditDoc();
  if (doc.is_object() && doc["calls"].is_array()) {
    for (const nlohmann::json& call : doc["calls"]) {
      if (call.value("name", std::string()) == name) return call;
    }
  }
  ADD_FAILURE() << "qwen_edit_calls.json has no call " << name;
  return Null();
}

const nlohmann::json& QwenEditResult(const std::string& name) {
  const nlohmann::json& doc = QwenEditDoc();
  if (doc.is_object() && doc.contains("results") && doc["results"].contains(name)) {
    return doc["results"][name];
  }
  ADD_FAILURE() << "qwen_edit_calls.json has no results for " << name;
  return Null();
}

std::string QwenEditCallFolder(const nlohmann::json& call) {
  return FixturesDir() + "/" + call["folder"].get<std::string>();
}

bool IsQwenEditV1Call(const nlohmann::json& call) {
  return call.is_object() && call.value("pipeline", std::string()) == "QwenImageEditPipeline";
}

int64_t QwenEditCallConditionArea(const nlohmann::json& call) {
  return IsQwenEditV1Call(call) ? imaging::kQwenEditVaeArea : imaging::kQwenEditConditionArea;
}

pipeline::QwenEditImageLabels QwenEditCallLabels(const nlohmann::json& call) {
  return IsQwenEditV1Call(call) ? pipeline::QwenEditImageLabels::kBare
                                : pipeline::QwenEditImageLabels::kNumbered;
}

torch::Tensor QwenEditRef(const std::string& key) {
  const auto& refs = Tensors(ReferenceFile(key), /*report=*/true);
  auto it = refs.find(key);
  if (it == refs.end()) {
    ADD_FAILURE() << "no reference tensor " << key << " in qwen-edit/" << ReferenceFile(key);
    return {};
  }
  return it->second;
}

bool HasQwenEditRef(const std::string& key) {
  return Tensors(ReferenceFile(key), /*report=*/false).count(key) != 0;
}

absl::StatusOr<imaging::RgbImage> QwenEditInput(const std::string& file) {
  const std::string path = QwenEditDir() + "/inputs/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  ASSIGN_OR_RETURN(imaging::DecodedImage d, imaging::DecodeImage(bytes.str()));
  return std::move(d.image);
}

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr) != 1) return "";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i)
    absl::StrAppend(&hex, absl::Hex(digest[i], absl::kZeroPad2));
  return hex;
}

torch::Tensor RgbTensor(const imaging::RgbImage& image) {
  return torch::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3},
                          torch::kUInt8)
      .clone();
}

absl::StatusOr<QwenEditImages> PrepareQwenEditCallImages(const nlohmann::json& call,
                                                         int size_multiple) {
  QwenEditImages out;
  const int64_t condition_area = QwenEditCallConditionArea(call);
  for (const nlohmann::json& file : call["images"]) {
    ASSIGN_OR_RETURN(imaging::RgbImage image, QwenEditInput(file.get<std::string>()));
    ASSIGN_OR_RETURN(imaging::RgbImage condition,
                     imaging::PrepareQwenEditConditionImage(image, condition_area));
    ASSIGN_OR_RETURN(imaging::RgbImage vae, imaging::PrepareQwenEditVaeImage(image, size_multiple));
    out.decoded.push_back(std::move(image));
    out.condition.push_back(std::move(condition));
    out.vae.push_back(std::move(vae));
  }
  if (out.decoded.empty()) return absl::InvalidArgumentError("the call has no images");
  return out;
}

namespace {

// The item fields every call sets the same way.
pipeline::JobItem CallItem(const nlohmann::json& call) {
  const nlohmann::json& args = call["args"];
  pipeline::JobItem item;
  item.prompt = item.prompt_2 = args["prompt"].get<std::string>();
  item.seed = call["seed"].get<uint64_t>();
  if (args.contains("negative_prompt") && args["negative_prompt"].is_string()) {
    item.negative_prompt = item.negative_prompt_2 = args["negative_prompt"].get<std::string>();
    // diffusers' true_cfg_scale default (4.0), used with a negative prompt.
    item.true_cfg_scale = args.value("true_cfg_scale", 4.0f);
  }
  return item;
}

}  // namespace

absl::StatusOr<pipeline::GenerationJob> QwenEditCallJob(const nlohmann::json& call,
                                                        const QwenEditImages& images,
                                                        int size_multiple) {
  const nlohmann::json& args = call["args"];
  if (images.decoded.empty()) return absl::InvalidArgumentError("no images");
  const imaging::RgbImage& last = images.decoded.back();
  ASSIGN_OR_RETURN(imaging::ImageSize size,
                   imaging::QwenEditOutputSize(last.width, last.height, args.value("width", 0),
                                               args.value("height", 0), size_multiple));
  pipeline::GenerationJob job;
  job.height = size.height;
  job.width = size.width;
  job.num_inference_steps = args["num_inference_steps"].get<int64_t>();
  job.max_sequence_length = args.value("max_sequence_length", int64_t{512});
  job.output = pipeline::JobOutput::kImage;
  pipeline::JobItem item = CallItem(call);
  for (const imaging::RgbImage& v : images.vae) item.images.push_back(RgbTensor(v));
  for (const imaging::RgbImage& c : images.condition) item.condition_images.push_back(RgbTensor(c));
  job.items.push_back(std::move(item));
  return job;
}

absl::StatusOr<pipeline::GenerationJob> QwenImg2ImgCallJob(const nlohmann::json& call,
                                                           int size_multiple) {
  const nlohmann::json& args = call["args"];
  pipeline::GenerationJob job;
  job.height = args["height"].get<int64_t>();
  job.width = args["width"].get<int64_t>();
  job.num_inference_steps = args["num_inference_steps"].get<int64_t>();
  job.max_sequence_length = args.value("max_sequence_length", int64_t{512});
  job.output = pipeline::JobOutput::kImage;
  pipeline::JobItem item = CallItem(call);
  item.strength = args["strength"].get<double>();
  ASSIGN_OR_RETURN(imaging::RgbImage init, QwenEditInput(call["images"][0].get<std::string>()));
  ASSIGN_OR_RETURN(imaging::RgbImage prepared,
                   imaging::PrepareImageToImage(init, static_cast<int>(job.width),
                                                static_cast<int>(job.height), size_multiple));
  item.images.push_back(RgbTensor(prepared));
  job.items.push_back(std::move(item));
  return job;
}

}  // namespace ditserve::testing
