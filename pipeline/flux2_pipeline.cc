#include "pipeline/flux2_pipeline.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pipeline/image_inputs.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"

namespace ditserve::pipeline {
namespace {

// diffusers' Flux2Pipeline.__call__ defaults.
constexpr int64_t kDefaultSteps = 50;
constexpr float kDefaultGuidance = 4.0f;
// Reference images: Flux2ImageProcessor.check_image_input's limits, the pipeline's area cap
// (1024 * 1024), and BFL's published maximum of reference images for FLUX.2 [dev] (10).
constexpr int kMaxReferenceImages = 10;
constexpr int64_t kReferenceMinSide = 64;
constexpr int64_t kReferenceMaxAspectRatio = 8;
constexpr int64_t kReferenceMaxArea = 1024 * 1024;

constexpr PipelineFamily kFlux2{
    "FLUX.2", "flux2", /*requires_vae=*/false,
    // The published FLUX.2-dev scheduler_config.json.
    R"({"num_train_timesteps": 1000, "use_dynamic_shifting": true, "shift": 3.0,
        "base_shift": 0.5, "max_shift": 1.15, "base_image_seq_len": 256,
        "max_image_seq_len": 4096})"};

// AutoencoderKLFlux2: its latents patchified (2x2) into the transformer's tokens, which its
// batch-norm statistics normalise.
using VaeConfig = vae::AutoencoderKLFlux2Config;
const VaeSpec<VaeConfig> kVae{
    &vae::LoadAutoencoderKLFlux2Config, [](const VaeConfig& c) { return c.patchified_channels(); },
    "patchified latent channels", [](const VaeConfig& c) { return c.pipeline_vae_scale_factor(); }};

}  // namespace

Flux2Pipeline::Flux2Pipeline()
    : LlmTextPipeline(kFlux2, &Flux2PromptEncoder::embed_width, "3 x the encoder's hidden_size") {
  UseTransformerConfig(&models::flux2::ParseFlux2TransformerConfig, &config_);
  UseVae(kVae, &vae_);
}

void Flux2Pipeline::FillCard(ModelCard* card) const {
  card->guidance_distilled = config_.guidance_embeds;
  FillTextCard(card);
  card->default_steps = kDefaultSteps;
  card->default_guidance_scale = kDefaultGuidance;
  if (vae_encodes()) {
    ImageInputCard& in = card->image_inputs;
    in.use = ImageUse::kReference;
    in.max_images = kMaxReferenceImages;
    in.size_multiple = vae_scale_factor() * 2;
    in.min_side = kReferenceMinSide;
    in.max_aspect_ratio = kReferenceMaxAspectRatio;
    in.max_area = kReferenceMaxArea;
  }
}

absl::Status Flux2Pipeline::CheckJob(const GenerationJob& job) const {
  if (!job.true_cfg()) return absl::OkStatus();
  // diffusers' Flux2Pipeline has no negative prompt: FLUX.2-dev is guidance-distilled.
  return absl::InvalidArgumentError(
      "true_cfg_scale: FLUX.2 takes no negative prompt (guidance-distilled)");
}

absl::StatusOr<TextConditioning> Flux2Pipeline::EncodeText(const GenerationJob& job,
                                                           bool negative) {
  if (negative)
    return absl::InternalError("FLUX.2 has no negative prompt (CheckJob refuses true CFG)");
  if (job.items[0].embeddings.has_value() || !text_site().present) {
    ASSIGN_OR_RETURN(
        torch::Tensor embeds,
        StackEmbeddings(
            job, /*negative=*/false, [](const PromptEmbeddings& e) { return e.prompt_embeds; },
            "prompt_embeds"));
    return TextConditioning{embeds.to(device(), dtype()), {}};
  }
  ASSIGN_OR_RETURN(torch::Tensor embeds, EncodePrompts(job));
  return TextConditioning{embeds, {}};
}

absl::StatusOr<torch::Tensor> Flux2Pipeline::EncodePrompts(const GenerationJob& job) {
  std::vector<std::string> prompts;
  for (const JobItem& item : job.items) prompts.push_back(item.prompt);
  const int64_t seq = job.max_sequence_length;
  if (text_site().sharded) {
    // Every rank tokenizes the same prompts; agree that it worked before the encoder's
    // collectives, so a bad prompt fails on every rank alike.
    RETURN_IF_ERROR(AgreeOnTokenizing(text_encoder().Tokenize(prompts, seq).status()));
    ASSIGN_OR_RETURN(torch::Tensor embeds, text_encoder().Encode(prompts, seq));
    return embeds.to(device(), dtype());
  }
  std::vector<torch::Tensor> tensors;
  RETURN_IF_ERROR(BroadcastFromRank0(
      comm(), "rank 0's text encoding",
      [&](std::vector<torch::Tensor>* out) -> absl::Status {
        ASSIGN_OR_RETURN(torch::Tensor embeds, text_encoder().Encode(prompts, seq));
        out->push_back(embeds.to(device(), dtype()).contiguous());
        return absl::OkStatus();
      },
      {{static_cast<int64_t>(prompts.size()), seq, config_.joint_attention_dim}}, dtype(), device(),
      &tensors));
  return tensors[0];
}

LatentGrid Flux2Pipeline::Grid(const GenerationJob& job) const {
  LatentGrid grid;  // the token grid: the VAE's latent sides, patchified 2x2
  grid.height = LatentSide(job.height, vae_scale_factor()) / 2;
  grid.width = LatentSide(job.width, vae_scale_factor()) / 2;
  grid.noise_shape = {1, config_.in_channels, grid.height, grid.width};
  grid.tokens = grid.height * grid.width;
  return grid;
}

absl::StatusOr<LatentLayout> Flux2Pipeline::LayOutLatents(const GenerationJob& job,
                                                          const LatentGrid& grid,
                                                          const torch::Tensor& noise,
                                                          const TextConditioning& text) {
  const int64_t batch = static_cast<int64_t>(job.items.size());
  const int64_t h = grid.height, w = grid.width, tokens = grid.tokens;
  LatentLayout out;
  out.latents = noise.reshape({batch, config_.in_channels, tokens}).permute({0, 2, 1}).contiguous();
  auto fopts = torch::TensorOptions().dtype(dtype()).device(device());
  out.fixed["img_ids"] = Flux2TokenIds(0, TokenGrid{h, w}, dtype(), device());
  const int64_t seq = text.embeds.size(1);
  torch::Tensor txt = torch::zeros({seq, 4}, fopts);
  txt.select(1, 3).copy_(torch::arange(seq, fopts));
  out.fixed["txt_ids"] = txt;
  if (config_.guidance_embeds) out.fixed["guidance"] = GuidanceScales(job, device());
  return out;
}

absl::StatusOr<ImageConditioning> Flux2Pipeline::ConditionOnImages(const GenerationJob& job,
                                                                   const LatentGrid&) {
  std::vector<torch::Tensor> ids;  // CheckRun: the same image sizes in every item
  for (size_t i = 0; i < job.items[0].images.size(); ++i) {
    const TokenGrid g = ImageTokenGrid(job.items[0].images[i], vae_scale_factor() * 2);
    ids.push_back(Flux2TokenIds(10 + 10 * static_cast<int64_t>(i), g, dtype(), device()));
  }
  ImageConditioning images;
  ASSIGN_OR_RETURN(
      images.reference_tokens,
      BroadcastReferenceTokens(job, [&](const torch::Tensor& rgb) -> absl::StatusOr<torch::Tensor> {
        ASSIGN_OR_RETURN(torch::Tensor x, VaeImageInput(rgb, vae_->dtype(), vae_->device()));
        ASSIGN_OR_RETURN(torch::Tensor latents, vae_->EncodeReference(x));
        return latents.flatten(2).transpose(1, 2);  // _pack_latents
      }));
  images.reference_ids["img_ids"] = torch::cat(ids, 0);
  return images;
}

std::optional<double> Flux2Pipeline::ScheduleShift(const LatentGrid& grid, int steps) const {
  return ComputeEmpiricalMu(grid.tokens, steps);
}

absl::StatusOr<torch::Tensor> Flux2Pipeline::Decode(const torch::Tensor& latents,
                                                    const LatentGrid& grid) const {
  return vae_->DecodePackedLatents(latents, grid.height, grid.width);
}

}  // namespace ditserve::pipeline
