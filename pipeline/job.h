// The typed boundary between a worker and its pipeline: what one generation job asks for, what it
// returns, and what a loaded model says about itself. No wire formats here: the worker converts
// ditserve.worker.v1 messages to and from these (worker/job_codec.h), in one place.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/lora/lora_choice.h"
#include "models/lora/lora_library.h"

namespace ditserve::pipeline {

// Precomputed conditioning a request brought with it: CPU float32 tensors as received (undefined =
// absent). prompt_embeds is (1, T, D); pooled_prompt_embeds (1, P); text_mask (1, T) of 0/1.
struct PromptEmbeddings {
  torch::Tensor prompt_embeds;
  torch::Tensor pooled_prompt_embeds;
  torch::Tensor text_mask;
};

// One request of a (possibly batched) job. Every field is validated and defaulted by the frontend.
struct JobItem {
  std::string prompt;
  std::string prompt_2;  // FLUX.1's T5 prompt (already defaulted to `prompt`)
  std::string negative_prompt;
  std::string negative_prompt_2;
  uint64_t seed = 0;
  float guidance_scale = 0;
  float true_cfg_scale = 1;
  std::optional<PromptEmbeddings> embeddings;           // instead of the text prompt
  std::optional<PromptEmbeddings> negative_embeddings;  // instead of the negative prompt
  // Input images as the frontend prepared them by the card's ImageInputCard rule: uint8
  // (H, W, 3) CPU tensors, RGB, in the request's order; at most image_inputs.max_images.
  std::vector<torch::Tensor> images;
  double strength = 0;  // ImageUse::kImageToImage: (0, 1], defaulted by the frontend; else 0
  // ImageUse::kQwenEdit: each image as prepared for the vision-language text encoder (the same
  // layout as `images`, one per image, in order; `images` then hold the VAE's). Empty otherwise.
  std::vector<torch::Tensor> condition_images;
};

enum class JobOutput { kImage, kLatents };

// One job: every item has the same shape parameters (the frontend batches only such requests).
struct GenerationJob {
  std::vector<JobItem> items;
  int64_t height = 0;
  int64_t width = 0;
  int64_t num_inference_steps = 0;
  int64_t max_sequence_length = 0;
  JobOutput output = JobOutput::kImage;
  // LoRA adapters for the whole job, in the frontend's canonical order (requests with different
  // choices are never batched together); empty = the base model.
  std::vector<lora::LoraChoice> loras;
  // 0..kMaxPreviewImages: images of the predicted clean latents that rank 0 decodes at evenly
  // spaced steps and hands to the progress callback (StepEvent::previews); images only.
  int preview_images = 0;
  static constexpr int kMaxPreviewImages = 3;
  // First Block Cache (models/common/first_block_cache.h): 0 = off, else in
  // (0, kMaxCacheThreshold]. A job with it on holds one request (its items are that request's
  // images, which share the decisions, as one diffusers call with num_images_per_prompt does).
  double cache_threshold = 0;
  static constexpr double kMaxCacheThreshold = 1.0;

  // True CFG runs when the items ask for a scale > 1 (diffusers: with a negative prompt; the
  // frontend only sets the scale when one is given). Batched items agree on it.
  bool true_cfg() const { return !items.empty() && items[0].true_cfg_scale > 1.0f; }
};

struct StageSeconds {
  double encode = 0;
  double denoise = 0;
  double decode = 0;
};

// Rank 0 returns one tensor per item, in the job's order; the other ranks return none.
struct GenerationResult {
  std::vector<torch::Tensor> images;   // JobOutput::kImage: (H, W, 3) float32 in [0, 1] on the CPU
  std::vector<torch::Tensor> latents;  // JobOutput::kLatents: (1, ...) float32 on the CPU, the
                                       // final latents in the layout the family's loop holds them
  StageSeconds seconds;
  // Transformer passes of the loop (a true-CFG step is two) that ran every block, and that reused
  // the step cache; every rank counts the same.
  uint32_t full_steps = 0;
  uint32_t cached_steps = 0;
  // With the cache on: every pass's decision in the order the passes ran (diffusers' order: per
  // step the prompt's pass, then the negative prompt's).
  struct CacheDecision {
    bool negative = false;  // the negative prompt's context ("uncond")
    bool computed = false;  // the remaining blocks ran
    // The value rank 0 compared with the threshold (FirstBlockCache::last_compared): NaN on a
    // context's first pass.
    double compared = std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<CacheDecision> cache_decisions;
};

// What a model does with input images (JobItem::images), as diffusers' pipeline for it does.
enum class ImageUse {
  kNone,          // takes no input image
  kReference,     // FLUX.2: reference images appended as tokens (Flux2Pipeline's `image`)
  kImageToImage,  // FLUX.1: FluxImg2ImgPipeline (`strength`)
  kKontext,       // FLUX.1 Kontext: FluxKontextPipeline (the condition image's tokens appended)
  // Qwen-Image-Edit-2509: QwenImageEditPlusPipeline (each image twice: a condition image for the
  // vision-language text encoder, JobItem::condition_images, and a VAE image whose tokens are
  // appended, JobItem::images).
  kQwenEdit,
};

// How the frontend prepares a model's input images (imaging/preprocess.h) and what it accepts.
struct ImageInputCard {
  ImageUse use = ImageUse::kNone;
  int max_images = 0;
  int min_images = 0;            // a request must bring at least this many (kQwenEdit: 1)
  // kQwenEdit: the area condition images are resized to (imaging/qwen_edit_sizes.h).
  int64_t condition_area = 0;
  int64_t size_multiple = 16;    // the pipeline's vae_scale_factor * 2
  int64_t min_side = 0;          // each decoded image's sides (FLUX.2: 64)
  int64_t max_aspect_ratio = 0;  // 0: any (FLUX.2: 8)
  int64_t max_area = 0;          // kReference: images above it are resized down to it (1024 * 1024)
  double default_strength = 0;   // kImageToImage: diffusers' default 0.6
};

// What a loaded model is and accepts; the frontend validates requests against it.
struct ModelCard {
  std::string name;    // the model folder's name ("FLUX.1-dev")
  std::string family;  // "flux1", "flux2", "qwenimage"
  std::string dtype;   // "float32", "bfloat16"
  std::string device;  // "cpu", "cuda"
  bool guidance_distilled = false;
  bool accepts_text_prompt = false;
  bool requires_prompt_embeddings = false;
  std::vector<int64_t> prompt_embeds_shape;         // -1 = any length
  std::vector<int64_t> pooled_prompt_embeds_shape;  // empty = not used
  bool accepts_text_mask = false;
  bool images_out = true;  // false: latents only (no VAE in the model folder)
  // Defaults for fields a request leaves at 0.
  int64_t default_height = 0;
  int64_t default_width = 0;
  int64_t default_steps = 0;
  float default_guidance_scale = 0;
  float default_true_cfg_scale = 0;  // with a negative prompt and no scale in the request
  int64_t default_max_sequence_length = 512;
  std::vector<lora::LoraCard> loras;  // the adapters loaded at start
  ImageInputCard image_inputs;
  // First Block Cache: every family offers it (GenerationJob::cache_threshold up to this bound).
  double max_cache_threshold = GenerationJob::kMaxCacheThreshold;
};

}  // namespace ditserve::pipeline
