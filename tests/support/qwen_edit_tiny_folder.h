// A tiny random-weight Qwen-Image-Edit-2509 folder (diffusers' QwenImageEditPlusPipeline layout),
// written by C++ from the committed tests/fixtures/qwenimage-tiny/, for end-to-end tests of the
// edit pipeline until the diffusers-made one (tests/fixtures/make_qwen_edit_fixtures.py,
// qwen-edit/qwenimage-edit-tiny/, tests/fixtures/QWEN_EDIT.md) exists. Same layout and VAE
// structure as that script's folder; it differs in what holds weights: here the text encoder is
// qwenimage-tiny's unchanged (depth-1 vision tower), and the VAE's values are ours (no diffusers
// init, no decoder taming), so no number of it can be compared with diffusers'.
//
// Also the one enumerator of AutoencoderKLQwenImage's tensors for a config (names and shapes as
// diffusers' __init__ makes them), with random values, for tests that need a Qwen-Image VAE of
// some layout.
//
// Thread-safety: stateless; concurrent calls on different folders are safe (the random values come
// from private generators, not LibTorch's global one).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"

namespace ditserve::testing {

// The edit VAE's structure (make_qwen_edit_fixtures.py's VAE16_CONFIG): spatial factor 16.
//   base_dim 4, z_dim 4, dim_mult [1, 1, 1, 1, 1], num_res_blocks 1, attn_scales [],
//   temperal_downsample [false, true, true, false], dropout 0, input_channels 3.
constexpr int64_t kQwenEditTinyVaeScaleFactor = 16;

// Writes the folder `dir` (its parent must be creatable; an existing `dir` is removed first, with
// RemoveTree, and replaced) and returns `dir` as given:
//
//   model_index.json  qwenimage-tiny's with "_class_name" "QwenImageEditPlusPipeline" and
//                     "processor": ["transformers", "Qwen2VLProcessor"] added (keys sorted, indent
//                     2, as diffusers' save_pretrained writes it)
//   transformer/, scheduler/, tokenizer/, text_encoder/
//                     qwenimage-tiny's files, copied byte for byte (text_encoder/ keeps its depth-1
//                     vision tower under "visual.")
//   processor/        qwenimage-tiny's tokenizer files (byte for byte) and preprocessor_config.json
//                     with the fixture script's keys, in its order: min_pixels 3136 (56 * 56),
//                     max_pixels 31360 (28 * 28 * 40), patch_size 14, temporal_patch_size 2,
//                     merge_size 2, image_mean / image_std (OpenAI CLIP's, as
//                     imaging/qwen2vl_image_processor.h), image_processor_type
//                     "Qwen2VLImageProcessor", processor_class "Qwen2VLProcessor"
//   vae/              config.json (AutoencoderKLQwenImage, the structure above, latents_mean
//                     0.5 * randn and latents_std 0.5 + 2 * rand, 4 values each rounded to 4
//                     decimals, drawn from `seed`) and diffusion_pytorch_model.safetensors:
//                     RandomQwenImageVaeWeights(config, seed), encoder and decoder, float32
//
// The folder's bytes depend only on `seed` and qwenimage-tiny (same seed: identical files).
// Errors: NOT_FOUND when qwenimage-tiny (FixturesDir()) lacks a file, INTERNAL on I/O failures
// (naming the path), INVALID_ARGUMENT for an empty `dir`. On an error the folder may be partly
// written.
// `pipeline_class`: model_index.json's "_class_name" (QwenImageEditPipeline, Qwen-Image-Edit, has
// the same components).
absl::StatusOr<std::string> WriteQwenEditTinyFolder(
    const std::string& dir, uint64_t seed,
    const std::string& pipeline_class = "QwenImageEditPlusPipeline");

// The parts of an AutoencoderKLQwenImage state dict.
struct QwenImageVaeParts {
  bool encoder = true;  // "encoder.*" and "quant_conv.*"
  bool decoder = true;  // "post_quant_conv.*" and "decoder.*"
};

// Every tensor AutoencoderKLQwenImage(config) has in the selected parts, named and shaped as
// diffusers' state_dict() (and so its save_pretrained) has them: the causal convs 5-D, the
// resamples' plain Conv2d "resample.1" 4-D, the RMS norms' gamma (C, 1, 1, 1) or (C, 1, 1) in
// attention, the "downsample3d" / "upsample3d" resamples' time_conv (which our loader does not
// read), attention layers in encoder.down_blocks where attn_scales lists a stage's scale (which our
// loader refuses), float32 on the CPU. `config` must be one ParseAutoencoderKLQwenImageConfig
// accepts. Values from private generators seeded from `seed`, one per part (the same seed gives the
// same values, and a part's values do not depend on whether the other is drawn): weights
// randn / sqrt(fan_in) (fan_in = in * kernel volume), biases 0.1 * randn, gammas 1 + 0.2 * randn.
std::map<std::string, torch::Tensor> RandomQwenImageVaeWeights(
    const vae::AutoencoderKLQwenImageConfig& config, uint64_t seed, QwenImageVaeParts parts = {});

}  // namespace ditserve::testing
