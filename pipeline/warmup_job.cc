#include "pipeline/warmup_job.h"

#include <vector>

#include "imaging/qwen_edit_sizes.h"

namespace ditserve::pipeline {
namespace {

// Zeros of `shape` with any -1 (a free sequence length) replaced by `length`.
torch::Tensor Zeros(const std::vector<int64_t>& shape, int64_t length) {
  std::vector<int64_t> sizes = shape;
  for (int64_t& s : sizes) {
    if (s < 0) s = length;
  }
  return torch::zeros(sizes, torch::kFloat32);
}

torch::Tensor GreyImage(int64_t height, int64_t width) {
  return torch::full({height, width, 3}, 128, torch::kUInt8);
}

// The model's fewest input images (a model that needs some), prepared as the frontend would for
// an input image of the output's size.
void AddWarmupImages(const ModelCard& card, const GenerationJob& job, JobItem* item) {
  const ImageInputCard& in = card.image_inputs;
  for (int i = 0; i < in.min_images; ++i) {
    if (in.use == ImageUse::kQwenEdit) {
      absl::StatusOr<imaging::QwenEditImageSizes> sizes =
          imaging::QwenEditImageSizesFor(static_cast<int>(job.width), static_cast<int>(job.height),
                                         static_cast<int>(in.size_multiple), in.condition_area);
      if (!sizes.ok()) return;  // the job then fails its checks, naming the images
      item->images.push_back(GreyImage(sizes->vae.height, sizes->vae.width));
      item->condition_images.push_back(GreyImage(sizes->condition.height, sizes->condition.width));
    } else {
      const int64_t m = in.size_multiple;
      item->images.push_back(GreyImage(job.height / m * m, job.width / m * m));
    }
  }
}

}  // namespace

GenerationJob WarmupJob(const ModelCard& card, int64_t height, int64_t width) {
  GenerationJob job;
  job.height = height > 0 ? height : card.default_height;
  job.width = width > 0 ? width : card.default_width;
  job.num_inference_steps = 2;
  job.max_sequence_length = card.default_max_sequence_length;
  job.output = card.images_out ? JobOutput::kImage : JobOutput::kLatents;
  JobItem item;
  item.seed = 0;
  item.guidance_scale = card.default_guidance_scale;
  if (card.requires_prompt_embeddings || !card.accepts_text_prompt) {
    PromptEmbeddings e;
    e.prompt_embeds = Zeros(card.prompt_embeds_shape, card.default_max_sequence_length);
    if (!card.pooled_prompt_embeds_shape.empty()) {
      e.pooled_prompt_embeds = Zeros(card.pooled_prompt_embeds_shape, 1);
    }
    item.embeddings = std::move(e);
  } else {
    item.prompt = "a photograph of a lighthouse on a cliff at dawn";
    item.prompt_2 = item.prompt;
  }
  AddWarmupImages(card, job, &item);
  job.items.push_back(std::move(item));
  return job;
}

}  // namespace ditserve::pipeline
