#include "pipeline/flux2_prompt_encoder.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/text/llm_prompt_embeds.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "models/tokenizers/tokenizer_files.h"
#include "pipeline/component_loading.h"
#include "pipeline/flux2_prompt_format.h"

namespace ditserve::pipeline {

absl::StatusOr<std::unique_ptr<Flux2PromptEncoder>> Flux2PromptEncoder::Load(
    const std::string& tokenizer_dir, const std::string& text_encoder_dir,
    const PipelineOptions& options, comm::Communicator* comm, bool sharded) {
  ASSIGN_OR_RETURN(std::string chat_template, ReadChatTemplate(tokenizer_dir));
  RETURN_IF_ERROR(CheckFlux2ChatTemplate(chat_template, tokenizer_dir));
  ASSIGN_OR_RETURN(tokenizers::TokenizerConfig tconfig,
                   tokenizers::LoadTokenizerConfig(tokenizer_dir + "/tokenizer_config.json"));
  if (!tconfig.bos_token) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_dir,
                     "/tokenizer_config.json: \"bos_token\" is missing (the chat "
                     "template starts with it)"));
  }
  ASSIGN_OR_RETURN(tokenizers::HfTokenizer tokenizer, tokenizers::LoadHfTokenizer(tokenizer_dir));
  if (!tokenizer.pad_id()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_dir, ": no pad token (FLUX.2 pads prompts to max_sequence_length)"));
  }
  std::unique_ptr<Flux2PromptEncoder> e(
      new Flux2PromptEncoder(std::move(tokenizer), *tconfig.bos_token));
  ASSIGN_OR_RETURN(LoadedTextModel loaded, LoadTextModel(text_encoder_dir, options, comm, sharded));
  e->own_comm_ = std::move(loaded.own_comm);
  const int64_t needed =
      *std::max_element(std::begin(kHiddenStateLayers), std::end(kHiddenStateLayers));
  if (loaded.model->num_hidden_states() <= needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        text_encoder_dir, ": the text model has ", loaded.model->config().num_hidden_layers,
        " layers; FLUX.2 reads hidden states 10, 20 and 30"));
  }
  e->model_ = std::move(loaded.model);
  e->weight_bytes_ = loaded.weight_bytes;
  return e;
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Flux2PromptEncoder::Tokenize(
    const std::vector<std::string>& prompts, int64_t max_sequence_length) const {
  tokenizers::HfEncodeOptions opts;
  // apply_chat_template tokenizes the rendered text, which carries its own <s>.
  opts.add_special_tokens = false;
  opts.max_length = static_cast<int>(max_sequence_length);
  opts.truncation = true;
  opts.truncation_side = tokenizers::Side::kRight;
  opts.pad_to_max_length = true;
  opts.padding_side = tokenizers::Side::kLeft;
  std::vector<int64_t> ids, mask;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto enc = tokenizer_.Encode(RenderFlux2Conversation(bos_, prompts[i]), opts);
    if (!enc.ok()) {
      return absl::Status(enc.status().code(), absl::StrCat("prompt: ", enc.status().message()));
    }
    ids.insert(ids.end(), enc->ids.begin(), enc->ids.end());
    mask.insert(mask.end(), enc->attention_mask.begin(), enc->attention_mask.end());
  }
  const int64_t batch = static_cast<int64_t>(prompts.size());
  return GuardTorch("prompt ids", [&] {
    return std::make_pair(torch::tensor(ids, torch::kInt64).view({batch, max_sequence_length}),
                          torch::tensor(mask, torch::kInt64).view({batch, max_sequence_length}));
  });
}

absl::StatusOr<torch::Tensor> Flux2PromptEncoder::Encode(const std::vector<std::string>& prompts,
                                                         int64_t max_sequence_length) {
  ASSIGN_OR_RETURN(auto tokens, Tokenize(prompts, max_sequence_length));
  const torch::Device device = model_->device();
  ASSIGN_OR_RETURN(std::vector<torch::Tensor> hidden,
                   model_->Forward(tokens.first.to(device), tokens.second.to(device),
                                   std::vector<int64_t>(std::begin(kHiddenStateLayers),
                                                        std::end(kHiddenStateLayers))));
  return text::StackHiddenStatesPerToken(hidden);
}

int64_t Flux2PromptEncoder::embed_width() const {
  return static_cast<int64_t>(std::size(kHiddenStateLayers)) * model_->config().hidden_size;
}

}  // namespace ditserve::pipeline
