#include "pipeline/flux1_prompt_encoder.h"

#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/text/clip_text_config.h"
#include "models/text/t5_config.h"
#include "sharding/loader.h"

namespace ditserve::pipeline {
namespace {

torch::Tensor IdsTensor(const std::vector<std::vector<int64_t>>& rows, torch::Device device) {
  const int64_t b = static_cast<int64_t>(rows.size());
  const int64_t n = b ? static_cast<int64_t>(rows[0].size()) : 0;
  torch::Tensor ids = torch::empty({b, n}, torch::kInt64);
  auto acc = ids.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < n; ++j) acc[i][j] = rows[i][j];
  }
  return ids.to(device);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Flux1PromptEncoder>> Flux1PromptEncoder::Load(
    const sharding::PipelineIndex& index, torch::Device device, torch::ScalarType dtype,
    uint64_t staging_buffer_bytes) {
  ASSIGN_OR_RETURN(std::string tok_dir, index.ComponentDir("tokenizer"));
  ASSIGN_OR_RETURN(std::string tok2_dir, index.ComponentDir("tokenizer_2"));
  ASSIGN_OR_RETURN(std::string clip_dir, index.ComponentDir("text_encoder"));
  ASSIGN_OR_RETURN(std::string t5_dir, index.ComponentDir("text_encoder_2"));
  ASSIGN_OR_RETURN(tokenizers::ClipTokenizer clip_tok, tokenizers::ClipTokenizer::Load(tok_dir));
  ASSIGN_OR_RETURN(tokenizers::T5Tokenizer t5_tok, tokenizers::T5Tokenizer::Load(tok2_dir));

  sharding::LoadOptions opts;
  opts.device = device;
  opts.dtype = dtype;
  opts.staging_buffer_bytes = staging_buffer_bytes;
  ASSIGN_OR_RETURN(text::ClipTextConfig clip_config,
                   text::LoadClipTextConfig(clip_dir + "/config.json"));
  ASSIGN_OR_RETURN(sharding::ShardedStateDict clip_sd,
                   sharding::LoadShard(clip_dir, nullptr, 0, 1, opts));
  ASSIGN_OR_RETURN(text::ClipTextModel clip, text::ClipTextModel::Create(clip_config, clip_sd));
  ASSIGN_OR_RETURN(text::T5Config t5_config, text::LoadT5Config(t5_dir + "/config.json"));
  ASSIGN_OR_RETURN(sharding::ShardedStateDict t5_sd,
                   sharding::LoadShard(t5_dir, nullptr, 0, 1, opts));
  ASSIGN_OR_RETURN(text::T5EncoderModel t5, text::T5EncoderModel::Create(t5_config, t5_sd));
  std::unique_ptr<Flux1PromptEncoder> enc(new Flux1PromptEncoder(
      std::move(clip_tok), std::move(t5_tok), std::move(clip), std::move(t5)));
  enc->weight_bytes_ = clip_sd.TotalBytes() + t5_sd.TotalBytes();
  return enc;
}

absl::StatusOr<Flux1PromptEmbeds> Flux1PromptEncoder::Encode(
    const std::vector<std::string>& prompts, const std::vector<std::string>& prompts_2,
    int max_sequence_length) const {
  std::vector<std::vector<int64_t>> clip_ids, t5_ids;
  for (const auto& p : prompts)
    clip_ids.push_back(clip_tok_.Encode(p, clip_tok_.model_max_length()));
  for (const auto& p : prompts_2) t5_ids.push_back(t5_tok_.Encode(p, max_sequence_length, true));
  ASSIGN_OR_RETURN(text::ClipTextOutput clip_out,
                   clip_.Forward(IdsTensor(clip_ids, clip_.device())));
  ASSIGN_OR_RETURN(torch::Tensor t5_out, t5_.Forward(IdsTensor(t5_ids, t5_.device())));
  return Flux1PromptEmbeds{t5_out, clip_out.pooler_output};
}

}  // namespace ditserve::pipeline
