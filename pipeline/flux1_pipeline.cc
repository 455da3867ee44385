#include "pipeline/flux1_pipeline.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "pipeline/image_inputs.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"

namespace ditserve::pipeline {
namespace {

// A FluxPipeline folder always has its scheduler_config.json.
constexpr PipelineFamily kFlux1{"FLUX.1", "flux1", /*requires_vae=*/true,
                                /*published_scheduler_json=*/nullptr};
// FluxImg2ImgPipeline.__call__'s default strength.
constexpr double kDefaultStrength = 0.6;

// AutoencoderKL, with its encoder when the checkpoint has one (image to image, Kontext): its
// latents 2x2-packed into the transformer's tokens.
using VaeConfig = vae::AutoencoderKLConfig;
const VaeSpec<VaeConfig> kVae{
    &vae::LoadAutoencoderKLConfig, [](const VaeConfig& c) { return c.latent_channels * 4; },
    "latent channels x 4 (2x2 packed)", [](const VaeConfig& c) { return c.scale_factor(); }};

}  // namespace

Flux1Pipeline::Flux1Pipeline() : DiffusionPipeline(kFlux1) {
  UseTransformerConfig(&models::flux1::ParseFluxTransformerConfig, &config_);
  UseVae(kVae, &vae_);
}

absl::Status Flux1Pipeline::LoadTextSide(const sharding::PipelineIndex* index,
                                         const PipelineOptions& options) {
  if (comm().rank() != 0) return absl::OkStatus();  // `index` is set: kFlux1 has no other folder
  ASSIGN_OR_RETURN(encoder_, Flux1PromptEncoder::Load(*index, options.device, options.dtype,
                                                      options.staging_buffer_bytes));
  AddWeightBytes(encoder_->weight_bytes());
  return absl::OkStatus();
}

void Flux1Pipeline::FillCard(ModelCard* card) const {
  card->guidance_distilled = config_.guidance_embeds;
  card->accepts_text_prompt = true;
  card->pooled_prompt_embeds_shape = {1, config_.pooled_projection_dim};
  // FLUX.1-dev (guidance-distilled): 28 steps at guidance 3.5, diffusers' defaults.
  // FLUX.1-schnell (no guidance embedder): the 4-step, guidance-free regime it was distilled for.
  card->default_steps = config_.guidance_embeds ? 28 : 4;
  card->default_guidance_scale = config_.guidance_embeds ? 3.5f : 0.0f;
  if (!vae_encodes()) return;
  ImageInputCard& in = card->image_inputs;
  in.max_images = 1;
  in.size_multiple = vae_scale_factor() * 2;
  if (kontext()) {
    in.use = ImageUse::kKontext;
    in.min_side = in.size_multiple;  // its aspect ratio is taken after flooring to the multiple
  } else {
    in.use = ImageUse::kImageToImage;
    in.min_side = 1;
    in.default_strength = kDefaultStrength;
  }
}

absl::StatusOr<TextConditioning> Flux1Pipeline::EncodeText(const GenerationJob& job,
                                                           bool negative) {
  if (!job.items[0].embeddings.has_value()) return BroadcastEncoded(job, negative);
  ASSIGN_OR_RETURN(torch::Tensor embeds,
                   StackEmbeddings(
                       job, negative, [](const PromptEmbeddings& e) { return e.prompt_embeds; },
                       "prompt_embeds"));
  ASSIGN_OR_RETURN(
      torch::Tensor pooled,
      StackEmbeddings(
          job, negative, [](const PromptEmbeddings& e) { return e.pooled_prompt_embeds; },
          "pooled_prompt_embeds"));
  return GuardTorch("prompt embeddings", [&] {
    return TextConditioning{embeds.to(device(), dtype()),
                            {{"pooled_projections", pooled.to(device(), dtype())}}};
  });
}

absl::StatusOr<TextConditioning> Flux1Pipeline::BroadcastEncoded(const GenerationJob& job,
                                                                 bool negative) {
  const int64_t batch = static_cast<int64_t>(job.items.size());
  const int64_t seq = job.max_sequence_length;
  std::vector<torch::Tensor> tensors;
  RETURN_IF_ERROR(BroadcastFromRank0(
      comm(), "rank 0's text encoding",
      [&](std::vector<torch::Tensor>* out) -> absl::Status {
        std::vector<std::string> prompts, prompts_2;
        for (const JobItem& item : job.items) {
          prompts.push_back(negative ? item.negative_prompt : item.prompt);
          prompts_2.push_back(negative ? item.negative_prompt_2 : item.prompt_2);
        }
        ASSIGN_OR_RETURN(Flux1PromptEmbeds encoded,
                         encoder_->Encode(prompts, prompts_2, static_cast<int>(seq)));
        return GuardTorchStatus("prompt embeddings", [&] {
          out->push_back(encoded.prompt_embeds.to(device(), dtype()).contiguous());
          out->push_back(encoded.pooled_prompt_embeds.to(device(), dtype()).contiguous());
        });
      },
      {{batch, seq, config_.joint_attention_dim}, {batch, config_.pooled_projection_dim}}, dtype(),
      device(), &tensors));
  return TextConditioning{tensors[0], {{"pooled_projections", tensors[1]}}};
}

absl::StatusOr<LatentLayout> Flux1Pipeline::LayOutLatents(const GenerationJob& job,
                                                          const LatentGrid& grid,
                                                          const torch::Tensor& noise,
                                                          const TextConditioning& text) {
  LatentLayout out;
  ASSIGN_OR_RETURN(out.latents, PackLatents(noise));
  out.fixed["img_ids"] = LatentImageIds(grid.height / 2, grid.width / 2, dtype(), device());
  out.fixed["txt_ids"] = torch::zeros({text.embeds.size(1), 3},
                                      torch::TensorOptions().dtype(dtype()).device(device()));
  if (config_.guidance_embeds) out.fixed["guidance"] = GuidanceScales(job, device());
  return out;
}

absl::StatusOr<torch::Tensor> Flux1Pipeline::Decode(const torch::Tensor& latents,
                                                    const LatentGrid& grid) const {
  ASSIGN_OR_RETURN(torch::Tensor unpacked, UnpackLatents(latents, grid.height, grid.width));
  return vae_->DecodeLatents(unpacked);
}

absl::StatusOr<ImageConditioning> Flux1Pipeline::ConditionOnImages(const GenerationJob& job,
                                                                   const LatentGrid& grid) {
  return kontext() ? Kontext(job) : ImageToImage(job, grid);
}

// FluxImg2ImgPipeline: the image (the output's size) encoded, sampled with the item's generator,
// shifted and scaled, in the noise's (1, C, h, w) layout.
absl::StatusOr<ImageConditioning> Flux1Pipeline::ImageToImage(const GenerationJob& job,
                                                              const LatentGrid& grid) {
  return ImageToImageConditioning(
      job, grid, {1, config_.in_channels / 4, grid.height, grid.width},
      [&](const JobItem& item) -> absl::StatusOr<torch::Tensor> {
        ASSIGN_OR_RETURN(torch::Tensor z, SamplePosterior(*vae_, item.images[0], item.seed));
        return vae_->ImageLatents(z);
      });
}

// FluxKontextPipeline: the condition image's mode, shifted, scaled and packed; ids (1, y, x).
absl::StatusOr<ImageConditioning> Flux1Pipeline::Kontext(const GenerationJob& job) {
  const TokenGrid g = ImageTokenGrid(job.items[0].images[0], vae_scale_factor() * 2);
  ImageConditioning images;
  ASSIGN_OR_RETURN(
      images.reference_tokens,
      BroadcastImageEncodings(
          job, {1, g.tokens(), config_.in_channels},
          [&](const JobItem& item) -> absl::StatusOr<torch::Tensor> {
            ASSIGN_OR_RETURN(torch::Tensor x,
                             VaeImageInput(item.images[0], vae_->dtype(), vae_->device()));
            ASSIGN_OR_RETURN(vae::LatentDistribution dist, vae_->EncodeLatentDistribution(x));
            ASSIGN_OR_RETURN(torch::Tensor z, vae_->ImageLatents(dist));
            return PackLatents(z);
          }));
  torch::Tensor ids = LatentImageIds(g.rows, g.cols, dtype(), device());
  ids.select(1, 0).fill_(1);  // "the first dimension set to 1 instead of 0"
  images.reference_ids["img_ids"] = ids;
  return images;
}

}  // namespace ditserve::pipeline
