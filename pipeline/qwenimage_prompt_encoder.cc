#include "pipeline/qwenimage_prompt_encoder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/text/llm_prompt_embeds.h"
#include "models/text/mrope_position_ids.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "pipeline/component_loading.h"

namespace ditserve::pipeline {

const char QwenImagePromptEncoder::kTemplate[] =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n";

absl::StatusOr<std::unique_ptr<QwenImagePromptEncoder>> QwenImagePromptEncoder::Load(
    const std::string& tokenizer_dir, const std::string& text_encoder_dir,
    const PipelineOptions& options, comm::Communicator* comm, bool sharded) {
  ASSIGN_OR_RETURN(tokenizers::HfTokenizer tokenizer, tokenizers::LoadHfTokenizer(tokenizer_dir));
  if (!tokenizer.pad_id()) {
    return absl::InvalidArgumentError(absl::StrCat(tokenizer_dir, ": no pad token"));
  }
  std::unique_ptr<QwenImagePromptEncoder> e(new QwenImagePromptEncoder(std::move(tokenizer)));
  ASSIGN_OR_RETURN(LoadedTextModel loaded, LoadTextModel(text_encoder_dir, options, comm, sharded));
  e->own_comm_ = std::move(loaded.own_comm);
  e->model_ = std::move(loaded.model);
  e->weight_bytes_ = loaded.weight_bytes;
  return e;
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> QwenImagePromptEncoder::Tokenize(
    const std::vector<std::string>& prompts) const {
  tokenizers::HfEncodeOptions opts;
  opts.max_length = static_cast<int>(kTokenizerMaxLength + kTemplateStartIdx);
  opts.truncation = true;
  std::vector<tokenizers::HfEncoding> encoded;
  size_t longest = 0;
  for (const std::string& prompt : prompts) {
    auto enc = tokenizer_.Encode(absl::StrReplaceAll(kTemplate, {{"{}", prompt}}), opts);
    if (!enc.ok()) {
      return absl::Status(enc.status().code(), absl::StrCat("prompt: ", enc.status().message()));
    }
    longest = std::max(longest, enc->ids.size());
    encoded.push_back(*std::move(enc));
  }
  // padding=True: to the longest of the batch, on the tokenizer's side (Qwen2: right).
  const int64_t batch = static_cast<int64_t>(prompts.size());
  std::vector<int64_t> ids, mask;
  for (const auto& enc : encoded) {
    ids.insert(ids.end(), enc.ids.begin(), enc.ids.end());
    mask.insert(mask.end(), enc.attention_mask.begin(), enc.attention_mask.end());
    ids.insert(ids.end(), longest - enc.ids.size(), *tokenizer_.pad_id());
    mask.insert(mask.end(), longest - enc.ids.size(), 0);
  }
  const int64_t len = static_cast<int64_t>(longest);
  return GuardTorch("prompt ids", [&] {
    return std::make_pair(torch::tensor(ids, torch::kInt64).view({batch, len}),
                          torch::tensor(mask, torch::kInt64).view({batch, len}));
  });
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> QwenImagePromptEncoder::Encode(
    const std::vector<std::string>& prompts, int64_t max_sequence_length) {
  ASSIGN_OR_RETURN(auto tokens, Tokenize(prompts));
  const torch::Device device = model_->device();
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> hidden,
                   model_->Forward(tokens.first.to(device), tokens.second.to(device), {-1}));
  return text::QwenImagePromptEmbeds(hidden[0], tokens.second.to(device), kTemplateStartIdx,
                                     max_sequence_length);
}

absl::Status QwenImagePromptEncoder::LoadEditTokenizer(const std::string& processor_dir,
                                                       QwenEditImageLabels labels) {
  ASSIGN_OR_RETURN(tokenizers::HfTokenizer tokenizer, tokenizers::LoadHfTokenizer(processor_dir));
  edit_tokenizer_.emplace(std::move(tokenizer));
  edit_labels_ = labels;
  return absl::OkStatus();
}

absl::StatusOr<QwenEditTokens> QwenImagePromptEncoder::TokenizeEdit(
    const std::string& prompt, const std::vector<std::array<int64_t, 3>>& grids,
    int merge_size) const {
  if (!edit_tokenizer_) return absl::InternalError("TokenizeEdit before LoadEditTokenizer");
  absl::StatusOr<QwenEditTokens> tokens =
      TokenizeQwenEditPrompts(*edit_tokenizer_, {prompt}, grids, merge_size, edit_labels_);
  if (!tokens.ok()) {
    return absl::Status(tokens.status().code(),
                        absl::StrCat("prompt: ", tokens.status().message()));
  }
  return tokens;
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> QwenImagePromptEncoder::EncodeEdit(
    const std::string& prompt, const std::vector<std::array<int64_t, 3>>& grids, int merge_size,
    const torch::Tensor& image_embeds) {
  ASSIGN_OR_RETURN(QwenEditTokens tokens, TokenizeEdit(prompt, grids, merge_size));
  std::vector<text::ImageGridThw> thw;
  for (const auto& g : grids) thw.push_back({g[0], g[1], g[2]});
  const torch::Device device = model_->device();
  ASSIGN_OR_RETURN(
      auto ids_mask, GuardTorch("edit prompt ids", [&] {
        return std::make_pair(
            torch::tensor(tokens.input_ids, torch::kInt64).view({tokens.batch, tokens.length}),
            torch::tensor(tokens.attention_mask, torch::kInt64)
                .view({tokens.batch, tokens.length}));
      }));
  const auto& [ids, mask] = ids_mask;
  ASSIGN_OR_RETURN(
      torch::Tensor positions,
      text::MropePositionIds(ids, mask, model_->config().image_token_id, thw, merge_size));
  text::LlmMultimodalInputs multimodal;
  multimodal.image_embeds = image_embeds.to(device);
  multimodal.position_ids = positions.to(device);
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> hidden,
                   model_->Forward(ids.to(device), mask.to(device), {-1}, multimodal));
  return text::QwenImagePromptEmbeds(hidden[0], mask.to(device), kQwenEditTemplateStartIdx,
                                     /*max_sequence_length=*/0);
}

}  // namespace ditserve::pipeline
