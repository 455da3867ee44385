// tests/support/qwen_edit_tiny_folder: the tiny Qwen-Image-Edit-Plus folder written from
// qwenimage-tiny is usable by the production readers and loaders: model_index.json through
// sharding::ReadPipelineIndex (processor listed), the factor-16 VAE through its config parser, the
// loader and AutoencoderKLQwenImage (encoder and decoder, 64 x 96 pixels <-> 4 x 6 latents), the
// vision tower through Qwen25VlVision::Load; the copied components are byte-identical, the
// processor's preprocessor_config.json holds the fixture script's keys, and the folder is
// deterministic for a seed. The VAE tensor enumerator is checked against the diffusers-made
// qwenimage-tiny VAE's names and shapes.
#include "tests/support/qwen_edit_tiny_folder.h"
#include "pipeline/latents.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "common/torch_compat.h"
#include "models/text/qwen2_5_vl_vision.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "models/vae/autoencoder_kl_qwenimage.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "sharding/loader.h"
#include "sharding/pipeline_index.h"
#include "sharding/safetensors.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

namespace fs = std::filesystem;

std::string FileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::vector<std::string> FileNames(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

fs::path BaseDir() {
  return fs::path(FixturesDir()) / "qwenimage-tiny";
}

class QwenEditTinyFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tmp_ = fs::temp_directory_path() / (std::string("ditserve-qwen-edit-folder-") +
                                        std::to_string(::getpid()) + "-" + info->name());
    ASSERT_TRUE(RemoveTree(tmp_.string()).ok());
    fs::create_directories(tmp_);
  }
  void TearDown() override { EXPECT_TRUE(RemoveTree(tmp_.string()).ok()); }

  // The folder for `seed` under the test's temporary folder.
  std::string Write(const std::string& name, uint64_t seed) {
    const std::string dir = (tmp_ / name).string();
    auto written = WriteQwenEditTinyFolder(dir, seed);
    EXPECT_TRUE(written.ok()) << written.status();
    if (written.ok()) EXPECT_EQ(*written, dir);
    return dir;
  }

  fs::path tmp_;
};

TEST_F(QwenEditTinyFolderTest, PipelineIndexListsTheEditComponents) {
  const std::string root = Write("edit", 7);
  auto index = sharding::ReadPipelineIndex(root);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->class_name, "QwenImageEditPlusPipeline");
  std::vector<std::string> names;
  for (const auto& c : index->components) names.push_back(c.name);
  // diffusers writes the keys sorted.
  EXPECT_EQ(names, (std::vector<std::string>{"processor", "scheduler", "text_encoder", "tokenizer",
                                             "transformer", "vae"}));
  const sharding::PipelineComponent* processor = index->Find("processor");
  ASSERT_NE(processor, nullptr);
  EXPECT_EQ(processor->library, "transformers");
  EXPECT_EQ(processor->class_name, "Qwen2VLProcessor");
  // The other components keep qwenimage-tiny's classes.
  auto base = sharding::ReadPipelineIndex(BaseDir().string());
  ASSERT_TRUE(base.ok()) << base.status();
  for (const auto& c : base->components) {
    const sharding::PipelineComponent* mine = index->Find(c.name);
    ASSERT_NE(mine, nullptr) << c.name;
    EXPECT_EQ(mine->library, c.library) << c.name;
    EXPECT_EQ(mine->class_name, c.class_name) << c.name;
  }
  for (const auto& c : index->components) {
    auto dir = index->ComponentDir(c.name);
    ASSERT_TRUE(dir.ok()) << dir.status();
    EXPECT_TRUE(fs::is_directory(*dir)) << *dir;
  }
}

TEST_F(QwenEditTinyFolderTest, CopiedComponentsAreByteIdentical) {
  const fs::path root = Write("edit", 7);
  for (const char* component : {"transformer", "scheduler", "tokenizer", "text_encoder"}) {
    const fs::path from = BaseDir() / component;
    ASSERT_EQ(FileNames(root / component), FileNames(from)) << component;
    for (const std::string& name : FileNames(from)) {
      EXPECT_TRUE(FileBytes(root / component / name) == FileBytes(from / name))
          << component << "/" << name;
    }
  }
  // processor/: the tokenizer's files and preprocessor_config.json.
  std::vector<std::string> expected = FileNames(BaseDir() / "tokenizer");
  expected.push_back("preprocessor_config.json");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(FileNames(root / "processor"), expected);
  for (const std::string& name : FileNames(BaseDir() / "tokenizer")) {
    EXPECT_TRUE(FileBytes(root / "processor" / name) == FileBytes(BaseDir() / "tokenizer" / name))
        << "processor/" << name;
  }
}

TEST_F(QwenEditTinyFolderTest, PreprocessorConfigHoldsTheFixtureScriptsKeys) {
  const fs::path root = Write("edit", 7);
  auto j = nlohmann::ordered_json::parse(FileBytes(root / "processor" / "preprocessor_config.json"),
                                         nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object());
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size",
                      "image_mean", "image_std", "image_processor_type", "processor_class"}));
  EXPECT_EQ(j["min_pixels"], 56 * 56);
  EXPECT_EQ(j["max_pixels"], 28 * 28 * 40);
  EXPECT_EQ(j["patch_size"], 14);
  EXPECT_EQ(j["temporal_patch_size"], 2);
  EXPECT_EQ(j["merge_size"], 2);
  EXPECT_EQ(j["image_mean"].get<std::vector<double>>(),
            (std::vector<double>{0.48145466, 0.4578275, 0.40821073}));
  EXPECT_EQ(j["image_std"].get<std::vector<double>>(),
            (std::vector<double>{0.26862954, 0.26130258, 0.27577711}));
  EXPECT_EQ(j["image_processor_type"], "Qwen2VLImageProcessor");
  EXPECT_EQ(j["processor_class"], "Qwen2VLProcessor");
}

TEST_F(QwenEditTinyFolderTest, VaeLoadsWithItsEncoderAtFactor16) {
  const fs::path vae_dir = fs::path(Write("edit", 7)) / "vae";
  auto config = vae::LoadAutoencoderKLQwenImageConfig((vae_dir / "config.json").string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->base_dim, 4);
  EXPECT_EQ(config->z_dim, 4);
  EXPECT_EQ(config->dim_mult, (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(config->num_res_blocks, 1);
  EXPECT_EQ(config->temperal_downsample, (std::vector<bool>{false, true, true, false}));
  EXPECT_TRUE(config->attn_scales.empty());
  ASSERT_EQ(config->latents_mean.size(), 4u);
  ASSERT_EQ(config->latents_std.size(), 4u);
  for (double s : config->latents_std) EXPECT_GT(s, 0.0);
  EXPECT_EQ(config->scale_factor(), 16);
  EXPECT_EQ(config->scale_factor(), kQwenEditTinyVaeScaleFactor);

  // The production loader (what the pipelines' LoadWholeComponent runs), then the model.
  auto sd = sharding::LoadShard(vae_dir.string(), nullptr, 0, 1, sharding::LoadOptions{});
  ASSERT_TRUE(sd.ok()) << sd.status();
  for (const auto& [name, t] : sd->tensors()) {
    EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
    EXPECT_TRUE(torch::isfinite(t).all().item<bool>()) << name;
  }
  EXPECT_TRUE(vae::StateDictHasVaeEncoder(*sd));
  auto model = vae::AutoencoderKLQwenImage::Create(*config, *sd);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(model->has_encoder());
  EXPECT_EQ(model->scale_factor(), 16);

  // 64 x 96 pixels -> 4 x 6 latents -> 64 x 96 pixels.
  auto gen = compat::SeededCpuGenerator(3);
  auto pixels =
      torch::rand({1, 3, 1, 64, 96}, gen, torch::TensorOptions().dtype(torch::kFloat)) * 2.0 - 1.0;
  auto latents = model->EncodeImageLatents(pixels);
  ASSERT_TRUE(latents.ok()) << latents.status();
  EXPECT_EQ(latents->sizes(), (torch::IntArrayRef{1, 4, 1, 4, 6}));
  EXPECT_TRUE(torch::isfinite(*latents).all().item<bool>());
  EXPECT_GT(latents->std().item<double>(), 1e-3);  // not a constant map
  auto packed = pipeline::PackLatents(latents->select(2, 0));
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->sizes(), (torch::IntArrayRef{1, 2 * 3, 16}));
  auto image = model->DecodeLatents(*latents);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->sizes(), (torch::IntArrayRef{1, 3, 64, 96}));
  auto decoded = model->Decode(*latents);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->sizes(), (torch::IntArrayRef{1, 3, 1, 64, 96}));
  // Sensible scale: a varied image, most of it inside the clamp.
  const double clamped = (image->abs() >= 0.999).to(torch::kDouble).mean().item<double>();
  std::cout << "[vae16] decoded pixels at the clamp: " << clamped
            << ", std: " << image->std().item<double>() << "\n";
  EXPECT_LT(clamped, 0.1);
  EXPECT_GT(image->std().item<double>(), 1e-3);
}

TEST_F(QwenEditTinyFolderTest, VisionTowerLoadsFromTheTextEncoder) {
  const fs::path te = fs::path(Write("edit", 7)) / "text_encoder";
  auto tower = text::Qwen25VlVision::Load(te.string());
  ASSERT_TRUE(tower.ok()) << tower.status();
  EXPECT_EQ(tower->prefix(), "visual.");
  EXPECT_EQ(tower->config().depth, 1);
  // One image of 4 x 4 patches: 4 merged tokens.
  const auto& c = tower->config();
  auto gen = compat::SeededCpuGenerator(4);
  auto pixel_values = torch::randn({16, c.patch_dim()}, gen, torch::TensorOptions());
  auto grid = torch::tensor({int64_t{1}, int64_t{4}, int64_t{4}}).view({1, 3});
  auto out = tower->Forward(pixel_values, grid);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->sizes(), (torch::IntArrayRef{4, c.out_hidden_size}));
  EXPECT_TRUE(torch::isfinite(*out).all().item<bool>());
}

TEST_F(QwenEditTinyFolderTest, DeterministicForASeedAndReplacesAnExistingFolder) {
  const fs::path a = Write("a", 11), b = Write("b", 11), c = Write("c", 12);
  const std::string vae_file = "vae/diffusion_pytorch_model.safetensors";
  EXPECT_TRUE(FileBytes(a / vae_file) == FileBytes(b / vae_file));
  EXPECT_TRUE(FileBytes(a / "vae/config.json") == FileBytes(b / "vae/config.json"));
  EXPECT_TRUE(FileBytes(a / "model_index.json") == FileBytes(b / "model_index.json"));
  EXPECT_FALSE(FileBytes(a / vae_file) == FileBytes(c / vae_file));
  EXPECT_FALSE(FileBytes(a / "vae/config.json") == FileBytes(c / "vae/config.json"));
  // Writing into an existing folder replaces it.
  std::ofstream(a / "stray.txt") << "x";
  fs::remove(a / "vae" / "config.json");
  auto again = WriteQwenEditTinyFolder(a.string(), 11);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(fs::exists(a / "stray.txt"));
  EXPECT_TRUE(FileBytes(a / vae_file) == FileBytes(b / vae_file));
  EXPECT_TRUE(FileBytes(a / "vae/config.json") == FileBytes(b / "vae/config.json"));
  EXPECT_FALSE(WriteQwenEditTinyFolder("", 11).ok());
}

// The enumerator names and shapes every tensor as diffusers does: the diffusers-made qwenimage-tiny
// VAE (encoder and decoder, downsample3d and upsample3d time_convs) has exactly these.
TEST(QwenImageVaeWeightsTest, MatchDiffusersNamesAndShapes) {
  const fs::path tiny = BaseDir() / "vae";
  auto config = vae::LoadAutoencoderKLQwenImageConfig((tiny / "config.json").string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto file =
      sharding::SafetensorsFile::Open((tiny / "diffusion_pytorch_model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, std::vector<int64_t>> diffusers;
  for (const auto& info : (*file)->tensors()) diffusers[info.name] = info.shape;
  std::map<std::string, std::vector<int64_t>> ours;
  for (const auto& [name, t] : RandomQwenImageVaeWeights(*config, 1)) {
    ours[name] = t.sizes().vec();
    EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
  }
  EXPECT_EQ(ours, diffusers);

  // Parts: the encoder's and the decoder's tensors, each drawn independently of the other.
  const auto both = RandomQwenImageVaeWeights(*config, 5);
  const auto enc = RandomQwenImageVaeWeights(*config, 5, QwenImageVaeParts{true, false});
  const auto dec = RandomQwenImageVaeWeights(*config, 5, QwenImageVaeParts{false, true});
  EXPECT_EQ(enc.size() + dec.size(), both.size());
  for (const auto* part : {&enc, &dec}) {
    for (const auto& [name, t] : *part) {
      const bool encoder_name = name.rfind("encoder.", 0) == 0 || name.rfind("quant_conv.", 0) == 0;
      EXPECT_EQ(encoder_name, part == &enc) << name;
      ASSERT_TRUE(both.count(name)) << name;
      EXPECT_TRUE(torch::equal(t, both.at(name))) << name;
    }
  }
  const auto other = RandomQwenImageVaeWeights(*config, 6);
  EXPECT_FALSE(torch::equal(other.at("decoder.conv_in.weight"), both.at("decoder.conv_in.weight")));
}

}  // namespace
}  // namespace ditserve::testing
