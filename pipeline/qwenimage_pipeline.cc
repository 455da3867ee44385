#include "pipeline/qwenimage_pipeline.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"

namespace ditserve::pipeline {
namespace {

// diffusers' QwenImagePipeline.__call__ defaults.
constexpr int64_t kDefaultSteps = 50;
constexpr float kDefaultTrueCfgScale = 4.0f;

// The model argument of the text mask.
constexpr char kMaskArg[] = "encoder_hidden_states_mask";

constexpr PipelineFamily kQwenImage{
    "Qwen-Image", "qwenimage", /*requires_vae=*/false,
    // The published Qwen-Image scheduler_config.json.
    R"({"num_train_timesteps": 1000, "use_dynamic_shifting": true, "shift": 1.0,
        "base_shift": 0.5, "max_shift": 0.9, "base_image_seq_len": 256,
        "max_image_seq_len": 8192, "shift_terminal": 0.02})"};

}  // namespace

QwenImagePipeline::QwenImagePipeline()
    : LlmTextPipeline(kQwenImage, &QwenImagePromptEncoder::hidden_size, "the encoder's hidden_size") {}

absl::StatusOr<TransformerShape> QwenImagePipeline::ParseTransformerConfig(
    const nlohmann::json& config) {
  return KeepConfig(models::qwenimage::ParseQwenImageTransformerConfig(config), &config_);
}

absl::StatusOr<int64_t> QwenImagePipeline::LoadVae(const std::string& vae_dir,
                                                   const PipelineOptions& options) {
  ASSIGN_OR_RETURN(vae::AutoencoderKLQwenImageConfig config,
                   vae::LoadAutoencoderKLQwenImageConfig(vae_dir + "/config.json"));
  RETURN_IF_ERROR(LoadOnRank0(vae_dir, config, options, &vae_));
  return config.scale_factor();
}

void QwenImagePipeline::FillCard(ModelCard* card) const {
  card->guidance_distilled = false;
  FillTextCard(card);
  card->accepts_text_mask = true;
  card->default_steps = kDefaultSteps;
  card->default_guidance_scale = 0.0f;
  card->default_true_cfg_scale = kDefaultTrueCfgScale;  // with a negative prompt and no scale
}

absl::StatusOr<TextConditioning> QwenImagePipeline::EncodeText(const GenerationJob& job,
                                                               bool negative) {
  const auto& first = negative ? job.items[0].negative_embeddings : job.items[0].embeddings;
  if (!first.has_value() && text_site().present) return EncodePrompts(job, negative);
  return FromRequest(job, negative);
}

absl::StatusOr<TextConditioning> QwenImagePipeline::FromRequest(const GenerationJob& job,
                                                                bool negative) {
  ASSIGN_OR_RETURN(torch::Tensor embeds,
                   StackEmbeddings(
                       job, negative, [](const PromptEmbeddings& e) { return e.prompt_embeds; },
                       "prompt_embeds"));
  bool any_mask = false;
  for (const JobItem& item : job.items) {
    const auto& e = negative ? item.negative_embeddings : item.embeddings;
    any_mask = any_mask || (e.has_value() && e->text_mask.defined());
  }
  TextConditioning out;
  out.embeds = embeds.to(device(), dtype());
  if (any_mask) {
    // Items without a mask attend to every token.
    ASSIGN_OR_RETURN(torch::Tensor mask,
                     StackEmbeddings(
                         job, negative,
                         [](const PromptEmbeddings& e) {
                           return e.text_mask.defined() ? e.text_mask
                                                        : torch::ones({1, e.prompt_embeds.size(1)});
                         },
                         "text_mask"));
    out.extra[kMaskArg] = mask.to(device());
  }
  return out;
}

absl::StatusOr<TextConditioning> QwenImagePipeline::EncodePrompts(const GenerationJob& job,
                                                                  bool negative) {
  std::vector<std::string> prompts;
  for (const JobItem& item : job.items)
    prompts.push_back(negative ? item.negative_prompt : item.prompt);
  const int64_t batch = static_cast<int64_t>(prompts.size());
  torch::Tensor embeds, mask;
  if (text_site().sharded) {
    RETURN_IF_ERROR(AgreeOnTokenizing(text_encoder().Tokenize(prompts).status()));
    ASSIGN_OR_RETURN(std::tie(embeds, mask),
                     text_encoder().Encode(prompts, job.max_sequence_length));
  } else {
    // The embeddings' length depends on the prompts: rank 0 broadcasts it first.
    std::vector<torch::Tensor> length;
    std::pair<torch::Tensor, torch::Tensor> encoded;
    RETURN_IF_ERROR(BroadcastFromRank0(
        comm(), "rank 0's text encoding",
        [&](std::vector<torch::Tensor>* out) -> absl::Status {
          ASSIGN_OR_RETURN(encoded, text_encoder().Encode(prompts, job.max_sequence_length));
          out->push_back(torch::full({1}, encoded.first.size(1),
                                     torch::TensorOptions().dtype(torch::kInt64).device(device())));
          return absl::OkStatus();
        },
        {{1}}, torch::kInt64, device(), &length));
    const int64_t seq = length[0].item<int64_t>();
    std::vector<torch::Tensor> tensors;
    RETURN_IF_ERROR(BroadcastFromRank0(
        comm(), "rank 0's text encoding",
        [&](std::vector<torch::Tensor>* out) -> absl::Status {
          out->push_back(encoded.first.to(device(), dtype()).contiguous());
          out->push_back(encoded.second.to(device(), dtype()).contiguous());
          return absl::OkStatus();
        },
        {{batch, seq, config_.joint_attention_dim}, {batch, seq}}, dtype(), device(), &tensors));
    embeds = tensors[0];
    mask = tensors[1];
  }
  TextConditioning out;
  out.embeds = embeds.to(device(), dtype());
  // diffusers passes no mask when every token is real.
  if (!mask.to(torch::kBool).all().item<bool>()) out.extra[kMaskArg] = mask.to(device());
  return out;
}

absl::StatusOr<LatentLayout> QwenImagePipeline::LayOutLatents(const GenerationJob& job,
                                                              const LatentGrid& grid,
                                                              const torch::Tensor& noise,
                                                              const TextConditioning&) {
  const int64_t batch = static_cast<int64_t>(job.items.size());
  LatentLayout out;
  ASSIGN_OR_RETURN(out.latents, PackLatents(noise));
  out.fixed["img_shapes"] =
      torch::tensor({1.0f, static_cast<float>(grid.height / 2), static_cast<float>(grid.width / 2)})
          .view({1, 3})
          .expand({batch, 3})
          .contiguous()
          .to(device());
  return out;
}

torch::Tensor QwenImagePipeline::CombineGuidance(const torch::Tensor& cond,
                                                 const torch::Tensor& uncond,
                                                 const torch::Tensor& scale) const {
  torch::Tensor comb = DiffusionPipeline::CombineGuidance(cond, uncond, scale);
  torch::Tensor cond_norm = torch::norm(cond, 2, {-1}, /*keepdim=*/true);
  torch::Tensor comb_norm = torch::norm(comb, 2, {-1}, /*keepdim=*/true);
  return comb * (cond_norm / comb_norm);
}

absl::StatusOr<torch::Tensor> QwenImagePipeline::Decode(const torch::Tensor& latents,
                                                        const LatentGrid& grid) const {
  return vae_->DecodePackedLatents(latents, grid.height, grid.width);
}

}  // namespace ditserve::pipeline
