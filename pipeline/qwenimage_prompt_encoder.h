// The Qwen-Image text side, as diffusers' QwenImagePipeline (_get_qwen_prompt_embeds +
// encode_prompt): each prompt is put into the pipeline's chat template, tokenized (truncated to
// 1024 + 34 tokens, padded on the right to the longest prompt of the batch), run through the
// Qwen2.5-VL text model with its attention mask; the last hidden state of each prompt's real
// tokens, minus the template's first 34, is zero-padded to the longest and cut to
// max_sequence_length, with a 0/1 mask of the real tokens.
//
// Qwen-Image-Edit (QwenImageEditPlusPipeline, after LoadEditTokenizer): a prompt with its
// condition images' grids becomes the edit template's token ids (qwen_edit_prompt.h, the
// processor's tokenizer), their 3-D M-RoPE positions (models/text/mrope_position_ids.h), and the
// text model's last hidden state with the image embeddings (qwen_edit_vision.h) in place of the
// <|image_pad|> tokens; the first 64 tokens are dropped, and max_sequence_length is not applied
// (the edit pipeline's encode_prompt does not cut).
//
// Placement as Flux2PromptEncoder: kSharded (every rank, a collective) or kRank0 (rank 0 only).
// Ownership: owns the tokenizer and the model; borrows the communicator (sharded).
// Threads: one Encode at a time, on the rank's engine thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/text/causal_lm_encoder.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "pipeline/pipeline.h"
#include "pipeline/qwen_edit_prompt.h"

namespace ditserve::pipeline {

class QwenImagePromptEncoder {
 public:
  // diffusers' QwenImagePipeline prompt_template_encode / _start_idx / tokenizer_max_length.
  static const char kTemplate[];
  static constexpr int64_t kTemplateStartIdx = 34;
  static constexpr int64_t kTokenizerMaxLength = 1024;

  static absl::StatusOr<std::unique_ptr<QwenImagePromptEncoder>> Load(
      const std::string& tokenizer_dir, const std::string& text_encoder_dir,
      const PipelineOptions& options, comm::Communicator* comm, bool sharded);

  // Token ids and attention mask (B, longest) int64 of the templated prompts.
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Tokenize(
      const std::vector<std::string>& prompts) const;

  // (embeds (B, L, hidden) in the model dtype on its device, mask (B, L) int64 on the CPU).
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Encode(
      const std::vector<std::string>& prompts, int64_t max_sequence_length);

  // Qwen-Image-Edit: the processor's tokenizer (`processor_dir`, which diffusers' pipeline
  // tokenizes edit prompts with) and the pipeline's vision-block labels (qwen_edit_prompt.h).
  // Errors name the folder.
  absl::Status LoadEditTokenizer(const std::string& processor_dir, QwenEditImageLabels labels);
  // The edit prompt's tokens for images of these grids (image_grid_thw, merge_size the
  // processor's); INVALID_ARGUMENT "prompt: ..." for a prompt the processor would refuse.
  absl::StatusOr<QwenEditTokens> TokenizeEdit(const std::string& prompt,
                                              const std::vector<std::array<int64_t, 3>>& grids,
                                              int merge_size) const;
  // (embeds (1, L, hidden) in the model dtype, mask (1, L) int64, both on its device) of
  // one edit prompt; `image_embeds`: (ImageTokens(grids), hidden) from QwenEditVision::Encode,
  // the same on every rank. Collective when sharded.
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> EncodeEdit(
      const std::string& prompt, const std::vector<std::array<int64_t, 3>>& grids, int merge_size,
      const torch::Tensor& image_embeds);

  int64_t hidden_size() const { return model_->config().hidden_size; }
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  explicit QwenImagePromptEncoder(tokenizers::HfTokenizer tokenizer)
      : tokenizer_(std::move(tokenizer)) {}

  tokenizers::HfTokenizer tokenizer_;
  std::optional<tokenizers::HfTokenizer> edit_tokenizer_;  // after LoadEditTokenizer
  QwenEditImageLabels edit_labels_ = QwenEditImageLabels::kNumbered;
  std::unique_ptr<comm::Communicator> own_comm_;
  std::unique_ptr<text::CausalLmTextEncoder> model_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace ditserve::pipeline
