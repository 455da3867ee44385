// The Qwen-Image-Edit fixtures (tests/fixtures/qwen-edit, make_qwen_edit_fixtures.py with the real
// diffusers + transformers: QwenImageEditPlusPipeline on qwen-edit/qwenimage-edit-tiny/, calls
// edit_one and edit_two; QwenImageEditPipeline on qwen-edit/qwenimage-edit-v1-tiny/ (the same
// components), call edit_v1; QwenImageImg2ImgPipeline on qwenimage-tiny/, call img2img;
// tests/fixtures/QWEN_EDIT.md): qwen_edit_calls.json, diffusers' tensors, the input images, and
// each call's images prepared and its job built as the frontend does (server/input_images: the
// decoded input, imaging::PrepareQwenEditVaeImage / PrepareQwenEditConditionImage at the model's
// condition area, the requested size floored by imaging::QwenEditOutputSize). Shared by
// qwen_edit_parity_test (CPU float32), qwen_edit_parity_e2e_test (through the binaries) and any
// GPU test of the same calls.
//
// Thread-safety: call from a test's thread (the loaded files are cached in function statics).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "imaging/image.h"
#include "pipeline/job.h"
#include "pipeline/qwen_edit_prompt.h"

namespace ditserve::testing {

// tests/fixtures/qwen-edit, and the edit pipeline folder inside it.
std::string QwenEditDir();
std::string QwenEditFolder();  // qwen-edit/qwenimage-edit-tiny

// qwen_edit_calls.json whole (null, with a test failure, when absent or unreadable).
const nlohmann::json& QwenEditDoc();
// Its "calls" entry named `name` (name, pipeline, folder relative to tests/fixtures, images,
// image_list, args, seed), and its "results" entry; null with a test failure when absent.
const nlohmann::json& QwenEditCall(const std::string& name);
const nlohmann::json& QwenEditResult(const std::string& name);
// The call's model folder: tests/fixtures/<call.folder>.
std::string QwenEditCallFolder(const nlohmann::json& call);

// Whether the call is QwenImageEditPipeline's (the first Qwen-Image-Edit: pipeline
// "QwenImageEditPipeline") rather than QwenImageEditPlusPipeline's.
bool IsQwenEditV1Call(const nlohmann::json& call);
// What the model card of the call's folder says and the frontend uses: the condition images' area
// (QwenImageEditPipeline: imaging::kQwenEditVaeArea, its one ~1024² resize feeds both encoders;
// otherwise imaging::kQwenEditConditionArea), and the template's vision blocks (kBare / kNumbered).
int64_t QwenEditCallConditionArea(const nlohmann::json& call);
pipeline::QwenEditImageLabels QwenEditCallLabels(const nlohmann::json& call);

// A tensor of diffusers' runs, as stored (ids int64, the rest float32):
// `<call>.<what>` from qwen_edit_reference.safetensors, `<call>.bf16.<what>` from
// qwen_edit_reference_bf16.safetensors. Undefined (and a test failure) when missing.
torch::Tensor QwenEditRef(const std::string& key);
// Whether the key is stored (no failure when not).
bool HasQwenEditRef(const std::string& key);

// qwen-edit/inputs/<file>, decoded as the frontend decodes it (imaging::DecodeImage).
absl::StatusOr<imaging::RgbImage> QwenEditInput(const std::string& file);
// The lowercase hex SHA-256 of `size` bytes: the fixtures keep diffusers' condition images
// (results.<c>.cond_image_sha256, uint8 H x W x 3) and processor patches (pixel_values_sha256,
// float32) as the hashes of their values, both compared exactly.
std::string Sha256Hex(const void* data, size_t size);
// An RgbImage as the uint8 (H, W, 3) CPU tensor a JobItem holds.
torch::Tensor RgbTensor(const imaging::RgbImage& image);

// An edit call's images, prepared by the frontend's rule for a card of `size_multiple`
// (vae_scale_factor * 2) and the call's condition area (QwenEditCallConditionArea): per input, in
// order, the decoded image, its VAE image and its condition image.
struct QwenEditImages {
  std::vector<imaging::RgbImage> decoded;
  std::vector<imaging::RgbImage> vae;
  std::vector<imaging::RgbImage> condition;
};
absl::StatusOr<QwenEditImages> PrepareQwenEditCallImages(const nlohmann::json& call,
                                                         int size_multiple);

// The edit call's job as the frontend builds it: prompt, negative prompt and true_cfg_scale (no
// negative prompt: no true CFG), steps, seed, max_sequence_length (the call's or the card's
// default 512), height / width given by the call floored to `size_multiple` (QwenEditOutputSize
// on the last image), images / condition_images from `images`; JobOutput::kImage.
absl::StatusOr<pipeline::GenerationJob> QwenEditCallJob(const nlohmann::json& call,
                                                        const QwenEditImages& images,
                                                        int size_multiple);

// The img2img call's job for a model whose card uses kImageToImage with `size_multiple`: the
// input (qwen-edit/inputs/<images[0]>) prepared by imaging::PrepareImageToImage at the call's
// height x width, strength, prompt, negative prompt, true_cfg_scale, steps, max_sequence_length,
// seed.
absl::StatusOr<pipeline::GenerationJob> QwenImg2ImgCallJob(const nlohmann::json& call,
                                                           int size_multiple);

}  // namespace ditserve::testing
