#include "pipeline/qwenimage_pipeline.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "imaging/qwen_edit_sizes.h"
#include "pipeline/image_inputs.h"
#include "pipeline/job_steps.h"
#include "pipeline/latents.h"

namespace ditserve::pipeline {
namespace {

// diffusers' QwenImagePipeline.__call__ defaults.
constexpr int64_t kDefaultSteps = 50;
constexpr float kDefaultTrueCfgScale = 4.0f;

// The model argument of the text mask.
constexpr char kMaskArg[] = "encoder_hidden_states_mask";

// QwenImageImg2ImgPipeline.__call__'s default strength.
constexpr double kDefaultStrength = 0.6;

// Editing's bound on an input image's longer side over its shorter (see FillCard).
constexpr int64_t kMaxEditAspectRatio = 100;

constexpr PipelineFamily kQwenImage{
    "Qwen-Image", "qwenimage", /*requires_vae=*/false,
    // The published Qwen-Image scheduler_config.json.
    R"({"num_train_timesteps": 1000, "use_dynamic_shifting": true, "shift": 1.0,
        "base_shift": 0.5, "max_shift": 0.9, "base_image_seq_len": 256,
        "max_image_seq_len": 8192, "shift_terminal": 0.02})"};

// The conditioning of (embeds, mask): diffusers passes no mask when every token is real.
TextConditioning MaskedConditioning(const torch::Tensor& embeds, const torch::Tensor& mask,
                                    torch::Device device, torch::ScalarType dtype) {
  TextConditioning out;
  out.embeds = embeds.to(device, dtype);
  if (!mask.to(torch::kBool).all().item<bool>()) out.extra[kMaskArg] = mask.to(device);
  return out;
}

// AutoencoderKLQwenImage, decoding one frame of its causal 3-D convolutions (and encoding, when
// the checkpoint has its encoder): its latents 2x2-packed into the transformer's tokens.
using VaeConfig = vae::AutoencoderKLQwenImageConfig;
const VaeSpec<VaeConfig> kVae{
    &vae::LoadAutoencoderKLQwenImageConfig, [](const VaeConfig& c) { return c.z_dim * 4; },
    "z_dim x 4 (2x2 packed)", [](const VaeConfig& c) { return c.scale_factor(); }};

}  // namespace

QwenImagePipeline::QwenImagePipeline()
    : LlmTextPipeline(kQwenImage, &QwenImagePromptEncoder::hidden_size,
                      "the encoder's hidden_size") {
  UseTransformerConfig(&models::qwenimage::ParseQwenImageTransformerConfig, &config_);
  UseVae(kVae, &vae_);
}

absl::Status QwenImagePipeline::LoadTextSide(const sharding::PipelineIndex* index,
                                             const PipelineOptions& options) {
  RETURN_IF_ERROR(LlmTextPipeline::LoadTextSide(index, options));
  if (!edit() || !text_site().HeldBy(comm().rank())) return absl::OkStatus();
  // An edit folder with its text encoder (so an index) tokenizes with its processor.
  absl::StatusOr<std::string> processor_dir = index->ComponentDir("processor");
  if (!processor_dir.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(root(), "/model_index.json: ", pipeline_class(),
                     " needs its 'processor' "
                     "component (the Qwen2-VL processor) to encode prompts with images"));
  }
  ASSIGN_OR_RETURN(vision_, QwenEditVision::Load(*processor_dir, text_site().text_encoder_dir,
                                                 text_encoder().hidden_size(), options,
                                                 /*with_tower=*/comm().rank() == 0));
  AddWeightBytes(vision_->weight_bytes());
  return text_encoder().LoadEditTokenizer(
      *processor_dir, edit_plus() ? QwenEditImageLabels::kNumbered : QwenEditImageLabels::kBare);
}

void QwenImagePipeline::FillCard(ModelCard* card) const {
  card->guidance_distilled = false;
  FillTextCard(card);
  card->accepts_text_mask = true;
  card->default_steps = kDefaultSteps;
  card->default_guidance_scale = 0.0f;
  card->default_true_cfg_scale = kDefaultTrueCfgScale;  // with a negative prompt and no scale
  if (!edit() && vae_encodes()) {  // QwenImageImg2ImgPipeline on the same folder
    ImageInputCard& in = card->image_inputs;
    in.use = ImageUse::kImageToImage;
    in.max_images = 1;
    in.min_side = 1;
    in.size_multiple = vae_scale_factor() * 2;
    in.default_strength = kDefaultStrength;
  }
  if (edit() && vae_encodes()) {
    ImageInputCard& in = card->image_inputs;
    in.use = ImageUse::kQwenEdit;
    in.max_images = edit_plus() ? kMaxEditImages : 1;
    in.condition_area = edit_plus() ? imaging::kQwenEditConditionArea : imaging::kQwenEditVaeArea;
    in.min_images = 1;  // the pipeline sizes its output from the last image
    in.size_multiple = vae_scale_factor() * 2;
    // The processor refuses aspect ratios above 200 after the ~384x384 resize, which can stretch
    // an image's ratio by its rounding to multiples of 32: 100 keeps every image well inside.
    in.max_aspect_ratio = kMaxEditAspectRatio;
  }
}

absl::Status QwenImagePipeline::CheckJob(const GenerationJob& job) const {
  if (!edit()) return absl::OkStatus();
  const JobItem& first = job.items[0];
  for (size_t i = 0; i < job.items.size(); ++i) {
    const JobItem& item = job.items[i];
    if (item.prompt != first.prompt || item.negative_prompt != first.negative_prompt) {
      // diffusers' QwenImageEditPlusPipeline takes one prompt a call (batch_size 1).
      return absl::InvalidArgumentError(
          absl::StrCat("item ", i,
                       ": Qwen-Image-Edit encodes one prompt a job (the frontend runs a request "
                       "with input images alone)"));
    }
    // CheckImages has matched a non-empty condition_images with the images; encoding the prompt
    // needs them.
    const bool encodes = !item.embeddings.has_value() && text_site().present;
    if (encodes && item.condition_images.empty() && !item.images.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", i, ": ", item.images.size(),
                       " images but no condition_images: the prompt is encoded with them"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TextConditioning> QwenImagePipeline::EncodeText(const GenerationJob& job,
                                                               bool negative) {
  // A job starts with its prompt's pass: the previous job's image embeddings are not this job's
  // (also when this job's prompt comes as embeddings and only its negative prompt is encoded).
  if (!negative) edit_image_embeds_ = torch::Tensor();
  const auto& first = negative ? job.items[0].negative_embeddings : job.items[0].embeddings;
  if (first.has_value() || !text_site().present) return FromRequest(job, negative);
  if (edit() && !job.items[0].images.empty()) return EncodeEditPrompts(job, negative);
  return EncodePrompts(job, negative);
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
  std::pair<torch::Tensor, torch::Tensor> encoded;
  if (text_site().sharded) {
    RETURN_IF_ERROR(AgreeOnTokenizing(text_encoder().Tokenize(prompts).status()));
    ASSIGN_OR_RETURN(encoded, text_encoder().Encode(prompts, job.max_sequence_length));
  } else {
    ASSIGN_OR_RETURN(encoded, BroadcastEncoded(static_cast<int64_t>(prompts.size()), [&] {
                       return text_encoder().Encode(prompts, job.max_sequence_length);
                     }));
  }
  return MaskedConditioning(encoded.first, encoded.second, device(), dtype());
}

absl::StatusOr<TextConditioning> QwenImagePipeline::EncodeEditPrompts(const GenerationJob& job,
                                                                      bool negative) {
  const JobItem& item = job.items[0];  // CheckJob: the items are one request's
  const std::string& prompt = negative ? item.negative_prompt : item.prompt;
  const int merge = vision_->image_config().merge_size;
  std::pair<torch::Tensor, torch::Tensor> encoded;
  if (text_site().sharded) {
    // Every rank: the grids (a pure function of the images' sizes) and the tokens, agreed on
    // before any collective; then rank 0's vision tower, broadcast; then the sharded encoder.
    absl::StatusOr<std::vector<std::array<int64_t, 3>>> grids =
        vision_->Grids(item.condition_images);
    absl::Status tokenized = grids.status();
    if (tokenized.ok()) tokenized = text_encoder().TokenizeEdit(prompt, *grids, merge).status();
    RETURN_IF_ERROR(AgreeOnTokenizing(tokenized));
    ASSIGN_OR_RETURN(torch::Tensor image_embeds,
                     EditImageEmbeds(item, negative, *grids, /*broadcast=*/true));
    ASSIGN_OR_RETURN(encoded, text_encoder().EncodeEdit(prompt, *grids, merge, image_embeds));
  } else {
    ASSIGN_OR_RETURN(
        encoded,
        BroadcastEncoded(1, [&]() -> absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> {
          ASSIGN_OR_RETURN(auto grids, vision_->Grids(item.condition_images));
          ASSIGN_OR_RETURN(torch::Tensor image_embeds,
                           EditImageEmbeds(item, negative, grids, /*broadcast=*/false));
          return text_encoder().EncodeEdit(prompt, grids, merge, image_embeds);
        }));
  }
  // encode_prompt's repeat over num_images_per_prompt: the job's items.
  const int64_t batch = static_cast<int64_t>(job.items.size());
  return MaskedConditioning(encoded.first.expand({batch, -1, -1}).contiguous(),
                            encoded.second.expand({batch, -1}).contiguous(), device(), dtype());
}

absl::StatusOr<torch::Tensor> QwenImagePipeline::EditImageEmbeds(
    const JobItem& item, bool negative, const std::vector<std::array<int64_t, 3>>& grids,
    bool broadcast) {
  if (negative && edit_image_embeds_.defined()) return edit_image_embeds_;
  torch::Tensor embeds;
  if (broadcast) {
    std::vector<torch::Tensor> out;
    RETURN_IF_ERROR(BroadcastFromRank0(
        comm(), "rank 0's image encoding",
        [&](std::vector<torch::Tensor>* tensors) -> absl::Status {
          ASSIGN_OR_RETURN(torch::Tensor e, vision_->Encode(item.condition_images));
          tensors->push_back(e.to(device(), dtype()).contiguous());
          return absl::OkStatus();
        },
        {{vision_->ImageTokens(grids), text_encoder().hidden_size()}}, dtype(), device(), &out));
    embeds = out[0];
  } else {
    ASSIGN_OR_RETURN(embeds, vision_->Encode(item.condition_images));
  }
  if (!negative) edit_image_embeds_ = embeds;
  return embeds;
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> QwenImagePipeline::BroadcastEncoded(
    int64_t batch,
    const std::function<absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>>()>& encode) {
  // The embeddings' length depends on the prompts: rank 0 broadcasts it first.
  std::vector<torch::Tensor> length;
  std::pair<torch::Tensor, torch::Tensor> encoded;
  RETURN_IF_ERROR(BroadcastFromRank0(
      comm(), "rank 0's text encoding",
      [&](std::vector<torch::Tensor>* out) -> absl::Status {
        ASSIGN_OR_RETURN(encoded, encode());
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
  return std::make_pair(tensors[0], tensors[1]);
}

absl::StatusOr<LatentLayout> QwenImagePipeline::LayOutLatents(const GenerationJob& job,
                                                              const LatentGrid& grid,
                                                              const torch::Tensor& noise,
                                                              const TextConditioning&) {
  const int64_t batch = static_cast<int64_t>(job.items.size());
  LatentLayout out;
  ASSIGN_OR_RETURN(out.latents, PackLatents(noise));
  // img_shapes: (frames, rows, columns) of the output's packed grid, then of each reference's
  // (QwenImageEditPlusPipeline: (1, vae_height // vae_scale_factor // 2, ...)), per item.
  std::vector<float> shapes = {1.0f, static_cast<float>(grid.height / 2),
                               static_cast<float>(grid.width / 2)};
  if (edit()) {
    for (const torch::Tensor& rgb : job.items[0].images) {
      const TokenGrid g = ImageTokenGrid(rgb, vae_scale_factor() * 2);
      shapes.insert(shapes.end(), {1.0f, static_cast<float>(g.rows), static_cast<float>(g.cols)});
    }
  }
  const int64_t k = static_cast<int64_t>(shapes.size() / 3);
  out.fixed["img_shapes"] =
      torch::tensor(shapes).view({1, k, 3}).expand({batch, k, 3}).contiguous().to(device());
  return out;
}

absl::StatusOr<ImageConditioning> QwenImagePipeline::ConditionOnImages(const GenerationJob& job,
                                                                       const LatentGrid& grid) {
  if (!edit()) return ImageToImage(job, grid);
  ImageConditioning images;
  ASSIGN_OR_RETURN(
      images.reference_tokens,
      BroadcastReferenceTokens(job, [&](const torch::Tensor& rgb) -> absl::StatusOr<torch::Tensor> {
        ASSIGN_OR_RETURN(torch::Tensor x, VaeImageInput(rgb, vae_->dtype(), vae_->device()));
        // _encode_vae_image (mode, (z - mean) / std), then _pack_latents.
        ASSIGN_OR_RETURN(torch::Tensor z, vae_->EncodeImageLatents(x));
        return PackLatents(z.select(2, 0));
      }));
  return images;
}

// QwenImageImg2ImgPipeline.prepare_latents: the image's posterior sampled with the item's
// generator (before the noise), (z - mean) * (1 / std), in the noise's layout.
absl::StatusOr<ImageConditioning> QwenImagePipeline::ImageToImage(const GenerationJob& job,
                                                                  const LatentGrid& grid) {
  // The posterior's sample is drawn in 5-D, (1, z_dim, 1, h, w): the noise's values.
  return ImageToImageConditioning(
      job, grid, {1, config_.in_channels / 4, 1, grid.height, grid.width},
      [&](const JobItem& item) -> absl::StatusOr<torch::Tensor> {
        ASSIGN_OR_RETURN(torch::Tensor z, SamplePosterior(*vae_, item.images[0], item.seed));
        ASSIGN_OR_RETURN(torch::Tensor scaled, vae_->ImageToImageLatents(z));
        return scaled.select(2, 0);
      });
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
