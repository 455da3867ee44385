#include "pipeline/warmup_job.h"

#include <vector>

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
  job.items.push_back(std::move(item));
  return job;
}

}  // namespace ditserve::pipeline
