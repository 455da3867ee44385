// The text side of diffusers' QwenImageEditPlusPipeline before the text encoder: a prompt and the
// condition images become token ids, as `_get_qwen_prompt_embeds` (diffusers 58eb52c0) builds the
// text and transformers 5.17's Qwen2VLProcessor tokenizes it (`self.processor(text=txt,
// images=image, padding=True, return_tensors="pt")`):
//
//   1. QwenEditTemplatedPrompt: one "Picture {i}: <|vision_start|><|image_pad|><|vision_end|>"
//      per image (i from 1, no separator), then the prompt, put into prompt_template_encode
//      (`txt = [template.format(base_img_prompt + e) for e in prompt]`);
//   2. ExpandQwenImagePads: each "<|image_pad|>" (ProcessorMixin.get_text_with_replacements: every
//      occurrence, the prompt's own included) becomes image_grid_thw[k].prod() // merge_size**2
//      copies, k counting the images in order across the whole batch (one iterator for the call);
//   3. TokenizeQwenEditPrompts: the tokenizer (the Qwen2 HfTokenizer that QwenImagePromptEncoder
//      loads), no truncation, padding=True: right padding with the pad token to the longest text,
//      attention mask 0 there.
//
// The encoder's last hidden state then loses its first kQwenEditTemplateStartIdx tokens per prompt.
//
// Batches: the processor hands each image's replacement out once per call, so a batch of B > 1
// prompts with N > 0 images has B*N pads but N replacements and fails in transformers
// (StopIteration); here it is INVALID_ARGUMENT. With B == 1 or N == 0 it matches.
//
// Torch-free. Everything here is a pure function; the tokenizer is borrowed for the call only
// (HfTokenizer::Encode may run concurrently).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/hf_tokenizer.h"

namespace ditserve::pipeline {

// QwenImageEditPlusPipeline.__init__:
//   self.prompt_template_encode = "<|im_start|>system\nDescribe the key features of the input
//   image (color, shape, size, texture, objects, background), then explain how the user's text
//   instruction should alter or modify the image. Generate a new image that meets the user's
//   requirements while maintaining consistency with the original input where
//   appropriate.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
extern const char kQwenEditTemplate[];
// _get_qwen_prompt_embeds:
//   img_prompt_template = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"
extern const char kQwenEditImagePromptTemplate[];
// Qwen2VLProcessor.image_token (the tokenizer's image_token): "<|image_pad|>".
extern const char kQwenImagePadToken[];
// QwenImageEditPlusPipeline.__init__: `self.prompt_template_encode_start_idx = 64`
// (`drop_idx`: the hidden states of a prompt's first 64 tokens are dropped after encoding).
inline constexpr int64_t kQwenEditTemplateStartIdx = 64;

// The two edit pipelines' vision blocks: QwenImageEditPlusPipeline numbers its images
// ("Picture i: " before each block); QwenImageEditPipeline (one image) has the bare block in its
// template, right after "<|im_start|>user\n", which is the same text as kQwenEditTemplate with an
// unnumbered block before the prompt.
enum class QwenEditImageLabels { kNumbered, kBare };

// base_img_prompt: "Picture 1: <|vision_start|><|image_pad|><|vision_end|>Picture 2: ..." for
// num_images images (kBare: "<|vision_start|><|image_pad|><|vision_end|>" each); "" for none
// (image=None). A single image (not a list) is num_images = 1. num_images must be >= 0.
std::string QwenEditImagePrompt(int num_images,
                                QwenEditImageLabels labels = QwenEditImageLabels::kNumbered);

// template.format(base_img_prompt + prompt). The prompt is inserted verbatim (str.format does not
// re-read what it inserts).
std::string QwenEditTemplatedPrompt(absl::string_view prompt, int num_images,
                                    QwenEditImageLabels labels = QwenEditImageLabels::kNumbered);

// The <|image_pad|> count of each image, in order: Qwen2VlImageTokenCount(grid, merge_size).
// Errors: INVALID_ARGUMENT for merge_size < 1, a grid entry < 1, or a product not divisible by
// merge_size^2 (the processor's grids always are).
absl::StatusOr<std::vector<int64_t>> QwenEditImageTokenCounts(
    const std::vector<std::array<int64_t, 3>>& grids_thw, int merge_size);

// Step 2 on a batch of texts: the k-th "<|image_pad|>" of the batch (texts in order, left to
// right) becomes token_counts[k] copies. Counts left over are ignored (as transformers).
// Errors: INVALID_ARGUMENT when the texts hold more pads than counts.
absl::StatusOr<std::vector<std::string>> ExpandQwenImagePads(
    const std::vector<std::string>& texts, const std::vector<int64_t>& token_counts);

// Row-major (batch, length) int64, what the processor returns as input_ids / attention_mask.
struct QwenEditTokens {
  int64_t batch = 0;
  int64_t length = 0;
  std::vector<int64_t> input_ids;
  std::vector<int64_t> attention_mask;
};

// Steps 1 to 3 for `prompts` (at least one) and the images' grids (image_grid_thw, in the
// pipeline's order; none for a prompt without images). After tokenizing, each row's count of the
// <|image_pad|> id must equal its text's count (the processor's _check_special_mm_tokens).
// Errors: INVALID_ARGUMENT for no prompts, B > 1 with images (see above), bad grids, a tokenizer
// without a pad token or without <|image_pad|>, a count mismatch; the tokenizer's errors.
absl::StatusOr<QwenEditTokens> TokenizeQwenEditPrompts(
    const tokenizers::HfTokenizer& tokenizer, const std::vector<std::string>& prompts,
    const std::vector<std::array<int64_t, 3>>& grids_thw, int merge_size,
    QwenEditImageLabels labels = QwenEditImageLabels::kNumbered);

}  // namespace ditserve::pipeline
