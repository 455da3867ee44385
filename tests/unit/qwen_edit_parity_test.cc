// Qwen-Image-Edit-2509 against diffusers' QwenImageEditPlusPipeline (issue 34) and Qwen-Image-Edit
// against QwenImageEditPipeline: every edit call of tests/fixtures/qwen-edit/qwen_edit_calls.json
// (make_qwen_edit_fixtures.py with the real diffusers + transformers, float32 on the CPU:
// edit_one and edit_two on qwen-edit/qwenimage-edit-tiny/, edit_v1 on qwen-edit/
// qwenimage-edit-v1-tiny/, the same components under _class_name QwenImageEditPipeline, edit_2511
// on qwen-edit/qwenimage-edit-2511-tiny/, the transformer's zero_cond_t on (Qwen-Image-Edit-2511);
// tests/fixtures/QWEN_EDIT.md) from the saved input PNGs, as the frontend prepares them (at the
// call's condition area: ~384² for the plus pipeline, ~1024² for QwenImageEditPipeline), through
// each stage of ours, with the call's own folder:
//
//   - the condition images (imaging::PrepareQwenEditConditionImage) equal the pipeline's resize
//     (edit_v1: also our VAE image), and the Qwen2-VL processor (imaging::Qwen2VlPreprocess with
//     the folder's processor/ settings) gives diffusers' pixel_values exactly (their sha256) and
//     the same image_grid_thw;
//   - the edit prompts' token ids and masks (TokenizeQwenEditPrompts, processor/'s tokenizer, the
//     call's image labels: kNumbered, or kBare for QwenImageEditPipeline) equal the processor's,
//     prompt and negative prompt;
//   - the 3-D M-RoPE position ids (text::MropePositionIds) equal what the text model's rotary
//     embedding got;
//   - the vision tower (text::Qwen25VlVision on those pixel_values) within 1e-4;
//   - the prompt embeddings (QwenImagePromptEncoder::EncodeEdit with diffusers' vision output) at
//     tp 1 and 2 (sharded) within 1e-4, masks equal;
//   - the VAE images' latents (AutoencoderKLQwenImage::EncodeImageLatents), per image and packed,
//     within 1e-4;
//   - the image, the whole pipeline on in-process ranks (tp 1; tp 2 with the text encoder on rank 0
//     and sharded), within 1e-3 of diffusers', tp 2 equal to tp 1.
//
// The img2img call (QwenImageImg2ImgPipeline on qwenimage-tiny/) runs when the Qwen-Image card
// offers image to image, and is skipped otherwise. Registered only once the fixtures exist
// (tests/unit/CMakeLists.txt, REQUIRES); always built.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/local_communicator.h"
#include "common/status_macros.h"
#include "imaging/qwen2vl_image_processor.h"
#include "models/text/causal_lm_config.h"
#include "models/text/mrope_position_ids.h"
#include "models/text/qwen2_5_vl_vision.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "models/vae/autoencoder_kl_qwenimage.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "pipeline/image_inputs.h"
#include "pipeline/latents.h"
#include "pipeline/pipeline.h"
#include "pipeline/qwen2vl_processor_config.h"
#include "pipeline/qwen_edit_prompt.h"
#include "pipeline/qwenimage_prompt_encoder.h"
#include "sharding/loader.h"
#include "tests/support/fixtures.h"
#include "tests/support/pipeline_group.h"
#include "tests/support/qwen_edit_calls.h"

namespace ditserve::pipeline {
namespace {

using testing::QwenEditCall;
using testing::QwenEditRef;
using testing::QwenEditResult;
using testing::RelativeError;

// The folder's VAE's spatial factor times 2: the card's size_multiple (the frontend's multiple).
int SizeMultiple(const std::string& folder) {
  auto config = vae::LoadAutoencoderKLQwenImageConfig(folder + "/vae/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? static_cast<int>(config->scale_factor() * 2) : 32;
}

// image_grid_thw (n, 3) as the processor's grids.
std::vector<std::array<int64_t, 3>> Grids(const torch::Tensor& grid_thw) {
  std::vector<std::array<int64_t, 3>> out;
  const torch::Tensor g = grid_thw.to(torch::kInt64).contiguous();
  for (int64_t i = 0; i < g.size(0); ++i) {
    out.push_back({g[i][0].item<int64_t>(), g[i][1].item<int64_t>(), g[i][2].item<int64_t>()});
  }
  return out;
}

torch::Tensor Int64(const std::vector<int64_t>& v, int64_t rows, int64_t cols) {
  return torch::tensor(v, torch::kInt64).view({rows, cols});
}

std::string MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return "shapes differ";
  return std::to_string((a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>());
}

// Whether diffusers' text model ran with the 3-D M-RoPE positions (the script's
// position_ids_kind); ours always does.
bool DiffusersUsedMrope3d(const std::string& call) {
  return QwenEditResult(call).value("position_ids_kind", std::string()) == "mrope3d";
}

class QwenEditParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    name_ = GetParam();
    call_ = QwenEditCall(name_);
    ASSERT_TRUE(call_.is_object()) << name_;
    folder_ = testing::QwenEditCallFolder(call_);
    labels_ = testing::QwenEditCallLabels(call_);
    multiple_ = SizeMultiple(folder_);
    auto images = testing::PrepareQwenEditCallImages(call_, multiple_);
    ASSERT_TRUE(images.ok()) << images.status();
    images_ = *std::move(images);
  }

  std::string Key(const std::string& what) const { return name_ + "." + what; }
  // A component folder of the call's model folder.
  std::string Component(const std::string& name) const { return folder_ + "/" + name; }
  imaging::Qwen2VlImageConfig ProcessorConfig() const {
    return testing::ValueOrAddFailure(LoadQwen2VlImageConfig(Component("processor")));
  }

  std::string name_;
  nlohmann::json call_;
  std::string folder_;  // tests/fixtures/<call.folder>
  QwenEditImageLabels labels_ = QwenEditImageLabels::kNumbered;
  int multiple_ = 32;
  testing::QwenEditImages images_;
};

// The condition images are the pipeline's resize; the processor's patches are diffusers' exactly.
TEST_P(QwenEditParity, ConditionImagesAndProcessor) {
  const nlohmann::json& inputs = QwenEditResult(name_)["inputs"];
  ASSERT_EQ(inputs.size(), images_.condition.size());
  for (size_t i = 0; i < images_.condition.size(); ++i) {
    SCOPED_TRACE(i);
    const imaging::RgbImage& c = images_.condition[i];
    EXPECT_EQ(c.width, inputs[i]["condition_size"][0].get<int>());
    EXPECT_EQ(c.height, inputs[i]["condition_size"][1].get<int>());
    EXPECT_EQ(images_.vae[i].width, inputs[i]["vae_size"][0].get<int>());
    EXPECT_EQ(images_.vae[i].height, inputs[i]["vae_size"][1].get<int>());
    const nlohmann::json& sha = QwenEditResult(name_)["cond_image_sha256"];
    ASSERT_TRUE(sha.is_array() && sha.size() > i) << "no cond_image_sha256 for image " << i;
    const torch::Tensor ours = testing::RgbTensor(c);
    EXPECT_EQ(testing::Sha256Hex(c.pixels.data(), c.pixels.size()), sha[i].get<std::string>())
        << "condition image " << i << " (" << c.width << "x" << c.height
        << ") differs from diffusers' resize";
    if (testing::IsQwenEditV1Call(call_)) {
      // QwenImageEditPipeline resizes once: its VAE image is its condition image.
      EXPECT_TRUE(torch::equal(testing::RgbTensor(images_.vae[i]), ours))
          << "our VAE image " << i << " is not our condition image";
    }
  }

  auto pv = imaging::Qwen2VlPreprocess(images_.condition, ProcessorConfig());
  ASSERT_TRUE(pv.ok()) << pv.status();
  const nlohmann::json& result = QwenEditResult(name_);
  EXPECT_EQ(std::vector<int64_t>({pv->rows, pv->cols}),
            result["pixel_values_shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(testing::Sha256Hex(pv->values.data(), pv->values.size() * sizeof(float)),
            result["pixel_values_sha256"].get<std::string>())
      << "pixel_values differ from the processor's";
  const std::vector<std::array<int64_t, 3>> grids = Grids(QwenEditRef(Key("image_grid_thw")));
  EXPECT_EQ(pv->grid_thw, grids);
}

// The templated prompts' ids with the image pads expanded, and their masks.
TEST_P(QwenEditParity, TokenIdsAndMasks) {
  auto tokenizer = tokenizers::LoadHfTokenizer(Component("processor"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<std::array<int64_t, 3>> grids = Grids(QwenEditRef(Key("image_grid_thw")));
  const int merge = ProcessorConfig().merge_size;
  const nlohmann::json& args = call_["args"];
  for (const bool negative : {false, true}) {
    SCOPED_TRACE(negative ? "negative prompt" : "prompt");
    const char* field = negative ? "negative_prompt" : "prompt";
    if (negative && !args.contains(field)) continue;
    auto tokens = TokenizeQwenEditPrompts(*tokenizer, {args[field].get<std::string>()}, grids,
                                          merge, labels_);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    const std::string prefix = negative ? "negative_" : "";
    const torch::Tensor ids = QwenEditRef(Key(prefix + "input_ids"));
    const torch::Tensor mask = QwenEditRef(Key(prefix + "attention_mask"));
    ASSERT_TRUE(ids.defined() && mask.defined());
    const torch::Tensor our_ids = Int64(tokens->input_ids, tokens->batch, tokens->length);
    ASSERT_EQ(our_ids.sizes(), ids.sizes());
    EXPECT_TRUE(torch::equal(our_ids, ids.to(torch::kInt64)));
    EXPECT_TRUE(torch::equal(Int64(tokens->attention_mask, tokens->batch, tokens->length),
                             mask.to(torch::kInt64)));
  }
}

// get_rope_index's 3-D positions of the prompt (diffusers' te.position_ids when its text model
// used them, else the script's alt_mrope3d.position_ids).
TEST_P(QwenEditParity, MropePositionIds) {
  auto config = text::LoadCausalLmConfig(Component("text_encoder"));
  ASSERT_TRUE(config.ok()) << config.status();
  const torch::Tensor ids = QwenEditRef(Key("input_ids"));
  const torch::Tensor mask = QwenEditRef(Key("attention_mask"));
  ASSERT_TRUE(ids.defined() && mask.defined());
  std::vector<text::ImageGridThw> thw;
  for (const auto& g : Grids(QwenEditRef(Key("image_grid_thw")))) thw.push_back({g[0], g[1], g[2]});
  auto pos = text::MropePositionIds(ids.to(torch::kInt64), mask.to(torch::kInt64),
                                    config->image_token_id, thw, ProcessorConfig().merge_size);
  ASSERT_TRUE(pos.ok()) << pos.status();
  torch::Tensor theirs;
  if (DiffusersUsedMrope3d(name_)) {
    theirs = QwenEditRef(Key("te.position_ids"));
  } else {
    std::printf(
        "%s: diffusers' text model ran with position_ids_kind %s; comparing the script's "
        "alt_mrope3d.position_ids\n",
        name_.c_str(), QwenEditResult(name_).value("position_ids_kind", std::string("?")).c_str());
    theirs = QwenEditRef(Key("alt_mrope3d.position_ids"));
  }
  ASSERT_TRUE(theirs.defined());
  theirs = theirs.to(torch::kInt64);
  if (theirs.dim() == 3 && theirs.size(0) == 4) theirs = theirs.narrow(0, 1, 3);  // text row first
  ASSERT_EQ(pos->sizes(), theirs.sizes());
  EXPECT_TRUE(torch::equal(*pos, theirs)) << "max abs diff " << MaxAbsDiff(*pos, theirs);
}

// The vision tower on the processor's pixel_values (ours: ConditionImagesAndProcessor holds them
// to diffusers' bit for bit) and diffusers' grids (replicated: no tensor parallelism).
TEST_P(QwenEditParity, VisionTower) {
  auto tower = text::Qwen25VlVision::Load(Component("text_encoder"));
  ASSERT_TRUE(tower.ok()) << tower.status();
  auto processed = imaging::Qwen2VlPreprocess(images_.condition, ProcessorConfig());
  ASSERT_TRUE(processed.ok()) << processed.status();
  const torch::Tensor pv = torch::from_blob(processed->values.data(),
                                            {processed->rows, processed->cols}, torch::kFloat32);
  const torch::Tensor grid = QwenEditRef(Key("image_grid_thw"));
  const torch::Tensor expected = QwenEditRef(Key("vision.out"));
  ASSERT_TRUE(pv.defined() && grid.defined() && expected.defined());
  auto out = tower->Forward(pv, grid);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sizes(), expected.sizes());
  const double err = RelativeError(*out, expected);
  EXPECT_LT(err, 1e-4) << "vision.out relative error " << err;
  std::printf("%s: vision tower relative error %.3g\n", name_.c_str(), err);
}

// The text encoder's edit prompt embeddings from diffusers' vision output, replicated at tp 1 and
// sharded at tp 2.
TEST_P(QwenEditParity, PromptEmbeddingsAtTp1And2) {
  const std::vector<std::array<int64_t, 3>> grids = Grids(QwenEditRef(Key("image_grid_thw")));
  const int merge = ProcessorConfig().merge_size;
  const torch::Tensor image_embeds = QwenEditRef(Key("vision.out"));
  ASSERT_TRUE(image_embeds.defined());
  const nlohmann::json& args = call_["args"];
  const bool mrope3d = DiffusersUsedMrope3d(name_);
  for (const int world : {1, 2}) {
    SCOPED_TRACE(world);
    std::mutex mu;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> encoded;  // prompt, negative
    absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
      PipelineOptions opts;
      ASSIGN_OR_RETURN(
          std::unique_ptr<QwenImagePromptEncoder> encoder,
          QwenImagePromptEncoder::Load(Component("tokenizer"), Component("text_encoder"), opts, &c,
                                       /*sharded=*/world > 1));
      RETURN_IF_ERROR(encoder->LoadEditTokenizer(Component("processor"), labels_));
      std::vector<std::pair<torch::Tensor, torch::Tensor>> mine;
      for (const char* field : {"prompt", "negative_prompt"}) {
        if (!args.contains(field)) continue;
        ASSIGN_OR_RETURN(auto e, encoder->EncodeEdit(args[field].get<std::string>(), grids, merge,
                                                     image_embeds));
        mine.push_back(std::move(e));
      }
      if (c.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        encoded = std::move(mine);
      }
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_FALSE(encoded.empty());
    for (size_t k = 0; k < encoded.size(); ++k) {
      const std::string prefix = k == 0 ? "" : "negative_";
      SCOPED_TRACE(prefix + "prompt_embeds");
      // Without diffusers' 3-D positions, the script's 3-D variant (prompt only) is the reference.
      if (!mrope3d && k > 0) continue;
      const torch::Tensor expected = mrope3d ? QwenEditRef(Key(prefix + "prompt_embeds"))
                                             : QwenEditRef(Key("alt_mrope3d.prompt_embeds"));
      const torch::Tensor mask = QwenEditRef(Key(prefix + "prompt_embeds_mask"));
      ASSERT_TRUE(expected.defined() && mask.defined());
      ASSERT_EQ(encoded[k].first.sizes(), expected.sizes());
      const double err = RelativeError(encoded[k].first, expected);
      EXPECT_LT(err, 1e-4) << "relative error " << err;
      EXPECT_TRUE(
          torch::equal(encoded[k].second.to(torch::kCPU, torch::kInt64), mask.to(torch::kInt64)));
      std::printf("%s tp %d: %sprompt_embeds relative error %.3g\n", name_.c_str(), world,
                  prefix.c_str(), err);
    }
  }
}

// The VAE images (prepared from the input files as the frontend does) through the encoder's mode,
// normalised, per image and packed in order.
TEST_P(QwenEditParity, VaeImageLatents) {
  auto config = vae::LoadAutoencoderKLQwenImageConfig(Component("vae") + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto sd = sharding::LoadShard(Component("vae"), nullptr, 0, 1, sharding::LoadOptions{});
  ASSERT_TRUE(sd.ok()) << sd.status();
  auto model = vae::AutoencoderKLQwenImage::Create(*config, *sd);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(model->has_encoder());
  std::vector<torch::Tensor> packed;
  for (size_t i = 0; i < images_.vae.size(); ++i) {
    SCOPED_TRACE(i);
    auto x = VaeImageInput(testing::RgbTensor(images_.vae[i]), torch::kFloat32, torch::kCPU);
    ASSERT_TRUE(x.ok()) << x.status();
    auto z = model->EncodeImageLatents(*x);
    ASSERT_TRUE(z.ok()) << z.status();
    const torch::Tensor expected = QwenEditRef(Key("image_latents." + std::to_string(i)));
    ASSERT_TRUE(expected.defined());
    ASSERT_EQ(z->sizes(), expected.sizes());
    const double err = RelativeError(*z, expected);
    EXPECT_LT(err, 1e-4) << "image_latents." << i << " relative error " << err;
    auto p = PackLatents(z->select(2, 0));
    ASSERT_TRUE(p.ok()) << p.status();
    packed.push_back(*p);
  }
  const torch::Tensor all = torch::cat(packed, 1);
  const torch::Tensor expected = QwenEditRef(Key("image_latents_packed"));
  ASSERT_TRUE(expected.defined());
  ASSERT_EQ(all.sizes(), expected.sizes());
  const double err = RelativeError(all, expected);
  EXPECT_LT(err, 1e-4) << "image_latents_packed relative error " << err;
  std::printf("%s: packed image latents relative error %.3g\n", name_.c_str(), err);
}

// The whole call through the pipeline, the job built as the frontend builds it.
TEST_P(QwenEditParity, ImageAtTp1And2) {
  if (!DiffusersUsedMrope3d(name_)) {
    GTEST_SKIP() << name_ << ": diffusers' text model did not run with the 3-D M-RoPE positions "
                 << "(position_ids_kind " << QwenEditResult(name_).value("position_ids_kind", "?")
                 << "), which ours always uses: its image is not comparable";
  }
  auto job = testing::QwenEditCallJob(call_, images_, multiple_);
  ASSERT_TRUE(job.ok()) << job.status();
  const torch::Tensor expected = QwenEditRef(Key("image"));
  ASSERT_TRUE(expected.defined());
  PipelineOptions opts;
  opts.model_dir = folder_;
  auto one = testing::RunPipelineGroup(1, opts, *job);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->card.image_inputs.use, ImageUse::kQwenEdit);
  EXPECT_EQ(one->card.image_inputs.size_multiple, multiple_);
  // The card's condition area is the one the images were prepared at (the frontend's).
  EXPECT_EQ(one->card.image_inputs.condition_area, testing::QwenEditCallConditionArea(call_));
  if (testing::IsQwenEditV1Call(call_)) EXPECT_EQ(one->card.image_inputs.max_images, 1);
  ASSERT_EQ(one->rank0().images.size(), 1u);
  const torch::Tensor& image = one->rank0().images[0];
  ASSERT_EQ(image.sizes(), expected.sizes());
  const double err = RelativeError(image, expected);
  EXPECT_LT(err, 1e-3) << "image relative error " << err;
  std::printf("%s tp 1: image relative error %.3g\n", name_.c_str(), err);
  for (TextEncoderPlacement placement :
       {TextEncoderPlacement::kAuto, TextEncoderPlacement::kSharded}) {
    SCOPED_TRACE(placement == TextEncoderPlacement::kSharded ? "sharded text encoder"
                                                             : "auto placement");
    opts.text_encoder_placement = placement;
    auto two = testing::RunPipelineGroup(2, opts, *job);
    ASSERT_TRUE(two.ok()) << two.status();
    ASSERT_EQ(two->rank0().images.size(), 1u);
    EXPECT_LT(RelativeError(two->rank0().images[0], image), 1e-5);
    EXPECT_LT(RelativeError(two->rank0().images[0], expected), 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Calls, QwenEditParity,
                         ::testing::Values("edit_one", "edit_two", "edit_v1", "edit_2511"));

// QwenImageImg2ImgPipeline on qwenimage-tiny: only where the Qwen-Image card offers image to image.
TEST(QwenImg2ImgParity, ImageAtTp1And2) {
  const nlohmann::json& call = QwenEditCall("img2img");
  ASSERT_TRUE(call.is_object());
  PipelineOptions opts;
  opts.model_dir = testing::QwenEditCallFolder(call);
  ModelCard card;
  absl::Status loaded = comm::RunLocalGroup(1, [&](comm::Communicator& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> p, LoadPipeline(opts, &c));
    card = p->Card();
    return absl::OkStatus();
  });
  ASSERT_TRUE(loaded.ok()) << loaded;
  ASSERT_EQ(card.image_inputs.use, ImageUse::kImageToImage);  // QwenImageImg2ImgPipeline
  auto job = testing::QwenImg2ImgCallJob(call, static_cast<int>(card.image_inputs.size_multiple));
  ASSERT_TRUE(job.ok()) << job.status();
  const torch::Tensor expected = QwenEditRef("img2img.image");
  ASSERT_TRUE(expected.defined());
  auto one = testing::RunPipelineGroup(1, opts, *job);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->rank0().images.size(), 1u);
  const torch::Tensor& image = one->rank0().images[0];
  ASSERT_EQ(image.sizes(), expected.sizes());
  EXPECT_LT(RelativeError(image, expected), 1e-3);
  auto two = testing::RunPipelineGroup(2, opts, *job);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->rank0().images.size(), 1u);
  EXPECT_LT(RelativeError(two->rank0().images[0], image), 1e-5);
}

}  // namespace
}  // namespace ditserve::pipeline
