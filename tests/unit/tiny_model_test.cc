// make-tiny-model (tools/tiny_model): the generated pipeline has exactly the layout, config keys,
// tensor names, shapes and dtypes of a diffusers-written FLUX.1 checkpoint (checked against
// fixtures/flux1-tiny, generated with the fixture's own configs), its tokenizers load with the
// project's tokenizers, generation is deterministic and atomic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "models/tokenizers/clip_tokenizer.h"
#include "models/tokenizers/t5_tokenizer.h"
#include "sharding/checkpoint.h"
#include "sharding/safetensors.h"
#include "tools/tiny_model/clip_bpe_vocab.h"
#include "tools/tiny_model/clip_text_weights.h"
#include "tools/tiny_model/configs.h"
#include "tools/tiny_model/file_util.h"
#include "tools/tiny_model/corpus.h"
#include "tools/tiny_model/flux_transformer_weights.h"
#include "tools/tiny_model/t5_weights.h"
#include "tools/tiny_model/tiny_model.h"
#include "tools/tiny_model/vae_weights.h"
#include "tools/tiny_model/weights_writer.h"

namespace ditserve::tiny_model {
namespace {

namespace fs = std::filesystem;

std::string FixtureDir() { return std::string(DITSERVE_FIXTURES_DIR) + "/flux1-tiny"; }
std::string SpmTrainer() { return std::string(DITSERVE_BINARY_DIR) + "/tools/ditserve-spm-train"; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ReadJson(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(path), nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << path;
  return j;
}

std::set<std::string> Keys(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

// A fresh folder under the test temp dir, removed at the end of the test.
class TempDir {
 public:
  // `name` defaults to the running test's name (there is none in SetUpTestSuite).
  explicit TempDir(std::string name = "") {
    if (name.empty()) name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    path_ = fs::path(::testing::TempDir()) /
            (std::string("tiny_model_") + name + "_" + std::to_string(::getpid()));
    (void)ditserve::RemoveTree(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { (void)ditserve::RemoveTree(path_); }
  std::string path() const { return path_.string(); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

struct HeaderEntry {
  sharding::DType dtype;
  std::vector<int64_t> shape;
  bool operator==(const HeaderEntry& o) const { return dtype == o.dtype && shape == o.shape; }
};

std::map<std::string, HeaderEntry> Headers(const std::string& component_dir) {
  std::map<std::string, HeaderEntry> out;
  auto ckpt = sharding::ComponentCheckpoint::Open(component_dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return out;
  for (const auto& [name, loc] : (*ckpt)->tensors()) {
    out[name] = {loc.info->dtype, loc.info->shape};
  }
  return out;
}

void ExpectSameHeaders(const std::map<std::string, HeaderEntry>& ours,
                       const std::map<std::string, HeaderEntry>& ref, const std::string& what) {
  EXPECT_EQ(ours.size(), ref.size()) << what;
  for (const auto& [name, entry] : ref) {
    auto it = ours.find(name);
    if (it == ours.end()) {
      ADD_FAILURE() << what << ": missing " << name;
      continue;
    }
    EXPECT_TRUE(it->second == entry) << what << ": " << name << " differs";
  }
  for (const auto& [name, entry] : ours) {
    if (!ref.count(name)) ADD_FAILURE() << what << ": extra " << name;
  }
}

TinyModelConfigs FixtureConfigs() {
  TinyModelConfigs c;
  c.model_index = ReadJson(FixtureDir() + "/model_index.json");
  c.scheduler = ReadJson(FixtureDir() + "/scheduler/scheduler_config.json");
  c.text_encoder = ReadJson(FixtureDir() + "/text_encoder/config.json");
  c.text_encoder_2 = ReadJson(FixtureDir() + "/text_encoder_2/config.json");
  c.transformer = ReadJson(FixtureDir() + "/transformer/config.json");
  c.vae = ReadJson(FixtureDir() + "/vae/config.json");
  const auto tok2 = ReadJson(FixtureDir() + "/tokenizer_2/tokenizer_config.json");
  c.t5_extra_ids = tok2.at("extra_ids").get<int64_t>();
  return c;
}

TinyModelOptions Options(uint64_t seed = 0) {
  TinyModelOptions o;
  o.seed = seed;
  o.spm_trainer = SpmTrainer();
  return o;
}

// Every regular file under `dir`, relative path -> bytes.
std::map<std::string, std::string> AllFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = ReadFile(e.path());
  }
  return files;
}

// --- Tensor names, shapes, dtypes against the fixture, component by component ---------------

struct ComponentCase {
  const char* folder;
  const char* base;
  absl::StatusOr<std::vector<TensorSpec>> (*tensors)(const nlohmann::json&);
};

TEST(TinyModelTest, TensorsMatchFixtureForFixtureConfigs) {
  TempDir tmp;
  const ComponentCase cases[] = {
      {"text_encoder", "model", &ClipTextTensors},
      {"text_encoder_2", "model", &T5EncoderTensors},
      {"vae", "diffusion_pytorch_model", &AutoencoderKlTensors},
      {"transformer", "diffusion_pytorch_model", &FluxTransformerTensors},
  };
  for (const auto& c : cases) {
    const std::string fixture = FixtureDir() + "/" + c.folder;
    auto config = sharding::ReadComponentConfig(fixture);
    ASSERT_TRUE(config.ok()) << config.status();
    auto specs = c.tensors(*config);
    ASSERT_TRUE(specs.ok()) << c.folder << ": " << specs.status();
    const std::string out = tmp.sub(c.folder);
    fs::create_directories(out);
    std::ofstream(out + "/config.json") << config->dump(2);
    auto written = WriteComponentWeights(out, c.base, *specs, 7, sharding::DType::kF32);
    ASSERT_TRUE(written.ok()) << written.status();
    ExpectSameHeaders(Headers(out), Headers(fixture), c.folder);
  }
}

TEST(TinyModelTest, ShardedTransformerLikeFixture) {
  TempDir tmp;
  const std::string fixture = FixtureDir() + "/transformer";
  auto config = sharding::ReadComponentConfig(fixture);
  ASSERT_TRUE(config.ok()) << config.status();
  auto specs = FluxTransformerTensors(*config);
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::ofstream(tmp.sub("config.json")) << config->dump(2);
  auto written =
      WriteComponentWeights(tmp.path(), "diffusion_pytorch_model", *specs, 1, sharding::DType::kF32,
                            /*num_shards=*/16);
  ASSERT_TRUE(written.ok()) << written.status();
  ExpectSameHeaders(Headers(tmp.path()), Headers(fixture), "sharded transformer");

  const auto ours = ReadJson(tmp.sub("diffusion_pytorch_model.safetensors.index.json"));
  const auto ref = ReadJson(fixture + "/diffusion_pytorch_model.safetensors.index.json");
  EXPECT_EQ(ours.at("metadata").at("total_size"), ref.at("metadata").at("total_size"));
  EXPECT_EQ(Keys(ours.at("weight_map")), Keys(ref.at("weight_map")));
  std::set<std::string> our_files, ref_files;
  for (const auto& f : ours.at("weight_map")) our_files.insert(f.get<std::string>());
  for (const auto& f : ref.at("weight_map")) ref_files.insert(f.get<std::string>());
  EXPECT_EQ(our_files, ref_files);  // diffusion_pytorch_model-000NN-of-00016.safetensors
  for (const auto& f : our_files) {
    auto file = sharding::SafetensorsFile::Open(tmp.sub(f));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  }
}

TEST(TinyModelTest, WeightsDoNotDependOnTheThreadCount) {
  TempDir tmp;
  auto specs = FluxTransformerTensors(TinyFluxTransformerConfig());
  ASSERT_TRUE(specs.ok()) << specs.status();
  fs::create_directories(tmp.sub("one"));
  fs::create_directories(tmp.sub("many"));
  ASSERT_TRUE(WriteComponentWeights(tmp.sub("one"), "w", *specs, 3, sharding::DType::kBF16, 2, 1).ok());
  ASSERT_TRUE(WriteComponentWeights(tmp.sub("many"), "w", *specs, 3, sharding::DType::kBF16, 2, 5).ok());
  for (const char* f : {"w-00001-of-00002.safetensors", "w-00002-of-00002.safetensors",
                        "w.safetensors.index.json"}) {
    std::ifstream a(tmp.sub(std::string("one/") + f), std::ios::binary);
    std::ifstream b(tmp.sub(std::string("many/") + f), std::ios::binary);
    const std::string one((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
    const std::string many((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(one.empty()) << f;
    EXPECT_EQ(one, many) << f;
  }
}

TEST(TinyModelTest, RemoveTreeRemovesFoldersButNotWhatLinksPointTo) {
  TempDir tmp;
  const std::string outside = tmp.sub("outside.txt");
  ASSERT_TRUE(WriteFile(outside, "keep").ok());
  const std::string tree = tmp.sub("tree");
  fs::create_directories(tree + "/a/b/c");
  ASSERT_TRUE(WriteFile(tree + "/a/b/c/f.txt", "x").ok());
  ASSERT_TRUE(WriteFile(tree + "/top.txt", "y").ok());
  fs::create_directory_symlink(tmp.path(), tree + "/a/link-to-parent");
  fs::create_symlink(outside, tree + "/link-to-file");
  ASSERT_TRUE(RemoveTree(tree).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(outside)) << "a link's target was removed";
  EXPECT_TRUE(RemoveTree(tree).ok()) << "a missing path is not an error";
  ASSERT_TRUE(RemoveTree(outside).ok());  // a plain file
  EXPECT_FALSE(fs::exists(outside));
}

TEST(TinyModelTest, GuidanceEmbedderFollowsConfig) {
  nlohmann::json config = TinyFluxTransformerConfig();
  auto with = FluxTransformerTensors(config);
  config["guidance_embeds"] = false;
  auto without = FluxTransformerTensors(config);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(with->size(), without->size() + 4);
  for (const auto& t : *without) EXPECT_EQ(t.name.find("guidance_embedder"), std::string::npos);
  config["axes_dims_rope"] = {4, 6, 8};  // sums to 18, head dim is 16
  EXPECT_FALSE(FluxTransformerTensors(config).ok());
}

int64_t ParameterCount(const std::vector<TensorSpec>& specs) {
  int64_t n = 0;
  for (const auto& t : specs) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    n += numel;
  }
  return n;
}

// The full-size preset's transformer and VAE are FLUX.1-dev's own: the same parameter counts as
// the released checkpoints (diffusers transformer_flux.py: 11,901,408,320 for the transformer with its guidance
// embedder; diffusers' AutoencoderKL for FLUX.1: 83,819,683), and the components agree.
TEST(TinyModelTest, Flux1DevSizePresetHasTheReleasedTransformerAndVae) {
  const TinyModelConfigs c = Flux1DevSizeConfigs();
  EXPECT_TRUE(CheckTinyModelConsistency(c).ok()) << CheckTinyModelConsistency(c);
  auto transformer = FluxTransformerTensors(c.transformer);
  ASSERT_TRUE(transformer.ok()) << transformer.status();
  EXPECT_EQ(ParameterCount(*transformer), int64_t{11901408320});
  auto vae = AutoencoderKlTensors(c.vae);
  ASSERT_TRUE(vae.ok()) << vae.status();
  EXPECT_EQ(ParameterCount(*vae), int64_t{83819683});
  // The tiny default stays tiny and consistent.
  EXPECT_TRUE(CheckTinyModelConsistency(DefaultTinyModelConfigs()).ok());
  TinyModelConfigs broken = c;
  broken.text_encoder_2["d_model"] = 2048;
  EXPECT_EQ(CheckTinyModelConsistency(broken).code(), absl::StatusCode::kInvalidArgument);
}

// --- The whole pipeline, generated with the fixture's configs ---------------------------------

class TinyModelFixturePipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir("fixture_pipeline");
    TinyModelOptions options = Options(3);
    options.configs = FixtureConfigs();
    summary_ = new absl::StatusOr<TinyModelSummary>(
        GenerateTinyModel(tmp_->sub("model"), options));
  }
  static void TearDownTestSuite() {
    delete summary_;
    delete tmp_;
  }
  static std::string Dir() { return tmp_->sub("model"); }
  static TempDir* tmp_;
  static absl::StatusOr<TinyModelSummary>* summary_;
};
TempDir* TinyModelFixturePipeline::tmp_ = nullptr;
absl::StatusOr<TinyModelSummary>* TinyModelFixturePipeline::summary_ = nullptr;

TEST_F(TinyModelFixturePipeline, SameFilesAndConfigsAsFixture) {
  ASSERT_TRUE(summary_->ok()) << summary_->status();
  // Every JSON file of the fixture exists with the same keys; with the fixture's own configs the
  // values are equal too (the tokenizers reach the fixture's vocabulary sizes).
  for (const char* f : {"model_index.json", "scheduler/scheduler_config.json",
                        "text_encoder/config.json", "text_encoder_2/config.json",
                        "transformer/config.json", "vae/config.json"}) {
    const auto ours = ReadJson(Dir() + "/" + f);
    const auto ref = ReadJson(FixtureDir() + "/" + f);
    EXPECT_EQ(Keys(ours), Keys(ref)) << f;
    EXPECT_EQ(ours, ref) << f;
  }
  for (const char* f : {"tokenizer/tokenizer_config.json", "tokenizer_2/tokenizer_config.json"}) {
    const auto ours = ReadJson(Dir() + "/" + f);
    const auto ref = ReadJson(FixtureDir() + "/" + f);
    EXPECT_EQ(Keys(ours), Keys(ref)) << f;
    EXPECT_EQ(ours, ref) << f;
  }
  // The files a loader looks for (the fixture's transformer is sharded, ours a single file).
  for (const char* f : {"tokenizer/vocab.json", "tokenizer/merges.txt", "tokenizer_2/spiece.model",
                        "text_encoder/model.safetensors", "text_encoder_2/model.safetensors",
                        "vae/diffusion_pytorch_model.safetensors",
                        "transformer/diffusion_pytorch_model.safetensors"}) {
    EXPECT_TRUE(fs::is_regular_file(Dir() + "/" + f)) << f;
  }
  for (const char* c : {"text_encoder", "text_encoder_2", "transformer", "vae"}) {
    ExpectSameHeaders(Headers(Dir() + "/" + c), Headers(FixtureDir() + "/" + c), c);
  }
  // No temporary folder is left next to the model.
  for (const auto& e : fs::directory_iterator(tmp_->path())) {
    EXPECT_EQ(e.path().filename(), "model");
  }
}

TEST_F(TinyModelFixturePipeline, SafetensorsWrittenLikeSavePretrained) {
  ASSERT_TRUE(summary_->ok()) << summary_->status();
  int64_t tensors = 0;
  uint64_t bytes = 0;
  for (const char* f : {"text_encoder/model.safetensors", "text_encoder_2/model.safetensors",
                        "vae/diffusion_pytorch_model.safetensors",
                        "transformer/diffusion_pytorch_model.safetensors"}) {
    auto file = sharding::SafetensorsFile::Open(Dir() + "/" + f);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}})) << f;
    const auto& infos = (*file)->tensors();
    tensors += static_cast<int64_t>(infos.size());
    for (const auto& info : infos) bytes += info.nbytes();
  }
  EXPECT_EQ((*summary_)->tensors, tensors);
  EXPECT_EQ((*summary_)->bytes, bytes);
}

TEST_F(TinyModelFixturePipeline, WeightsHaveTheDocumentedInitialisation) {
  ASSERT_TRUE(summary_->ok()) << summary_->status();
  auto file = sharding::SafetensorsFile::Open(Dir() + "/transformer/diffusion_pytorch_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto values = [&](const std::string& name) {
    auto info = (*file)->Find(name);
    EXPECT_TRUE(info.ok()) << name;
    std::vector<float> v((*info)->numel());
    std::memcpy(v.data(), (*file)->Data(**info), v.size() * sizeof(float));
    return v;
  };
  for (float x : values("transformer_blocks.0.attn.norm_q.weight")) EXPECT_EQ(x, 1.0f);
  for (float x : values("transformer_blocks.0.attn.to_q.bias")) EXPECT_EQ(x, 0.0f);
  const auto w = values("single_transformer_blocks.1.proj_out.weight");  // [64, 320]
  double sum = 0, sq = 0;
  for (float x : w) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / w.size();
  const double stddev = std::sqrt(sq / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stddev, 1.0 / std::sqrt(320.0), 0.1 / std::sqrt(320.0));
}

TEST_F(TinyModelFixturePipeline, ClipTokenizerLoadsAndEncodes) {
  ASSERT_TRUE(summary_->ok()) << summary_->status();
  auto clip = tokenizers::ClipTokenizer::Load(Dir() + "/tokenizer");
  ASSERT_TRUE(clip.ok()) << clip.status();
  const int64_t vocab = ReadJson(Dir() + "/text_encoder/config.json").at("vocab_size");
  EXPECT_EQ(static_cast<int64_t>(clip->vocab_size()), vocab);
  EXPECT_EQ(clip->bos_id(), vocab - 2);
  EXPECT_EQ(clip->eos_id(), vocab - 1);
  EXPECT_EQ(clip->pad_id(), vocab - 1);
  const auto ids = clip->Encode("A photo of a cat, cinematic lighting");
  ASSERT_EQ(ids.size(), 77u);
  EXPECT_EQ(ids[0], vocab - 2);
  const auto tokens = clip->Tokenize("A photo of a cat, cinematic lighting");
  // Frequent corpus words became whole tokens; no byte is unknown.
  EXPECT_LT(tokens.size(), 20u);
  ASSERT_TRUE(clip->TokenToId("a</w>").has_value());
  EXPECT_EQ(tokens[0], *clip->TokenToId("a</w>"));
  EXPECT_EQ(ids[tokens.size() + 1], vocab - 1);
  for (size_t i = tokens.size() + 1; i < ids.size(); ++i) EXPECT_EQ(ids[i], vocab - 1);
  for (int64_t id : tokens) EXPECT_LT(id, vocab - 2);
}

TEST_F(TinyModelFixturePipeline, T5TokenizerLoadsAndEncodes) {
  ASSERT_TRUE(summary_->ok()) << summary_->status();
  auto t5 = tokenizers::T5Tokenizer::Load(Dir() + "/tokenizer_2");
  ASSERT_TRUE(t5.ok()) << t5.status();
  const int64_t vocab = ReadJson(Dir() + "/text_encoder_2/config.json").at("vocab_size");
  EXPECT_EQ(static_cast<int64_t>(t5->vocab_size()), vocab);
  EXPECT_EQ(t5->eos_id(), 1);
  EXPECT_EQ(t5->pad_id(), 0);
  EXPECT_EQ(t5->unk_id(), 2);
  const auto unpadded = t5->EncodeUnpadded("A photo of a cat, cinematic lighting");
  ASSERT_GE(unpadded.size(), 2u);
  EXPECT_EQ(unpadded.back(), 1);
  for (size_t i = 0; i + 1 < unpadded.size(); ++i) {
    EXPECT_GT(unpadded[i], 2) << "special or unknown piece at " << i;
    EXPECT_LT(unpadded[i], vocab - 100) << "an extra id at " << i;
  }
  const auto padded = t5->Encode("A photo of a cat, cinematic lighting", 32, /*pad=*/true);
  ASSERT_EQ(padded.size(), 32u);
  for (size_t i = 0; i < unpadded.size(); ++i) EXPECT_EQ(padded[i], unpadded[i]);
  for (size_t i = unpadded.size(); i < padded.size(); ++i) EXPECT_EQ(padded[i], 0);
  // <extra_id_0> is the last id, as transformers numbers T5's sentinels.
  const auto sentinel = t5->Tokenize("<extra_id_0>");
  ASSERT_EQ(sentinel.size(), 1u);
  EXPECT_EQ(sentinel[0], vocab - 1);
}

// --- Defaults, determinism, atomicity ---------------------------------------------------------

TEST(TinyModelTest, DefaultModelIsDeterministicAndMatchesFixtureKeys) {
  TempDir tmp;
  auto a = GenerateTinyModel(tmp.sub("a"), Options(5));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = GenerateTinyModel(tmp.sub("b"), Options(5));
  ASSERT_TRUE(b.ok()) << b.status();
  const auto files_a = AllFiles(tmp.sub("a"));
  const auto files_b = AllFiles(tmp.sub("b"));
  EXPECT_EQ(files_a.size(), 15u);
  EXPECT_TRUE(files_a == files_b) << "same seed, different bytes";

  // Default sizes: the vocabularies the configs ask for are reached.
  EXPECT_EQ(a->clip_vocab_size, 1024);
  EXPECT_EQ(a->t5_vocab_size, 612);
  for (const char* f : {"model_index.json", "scheduler/scheduler_config.json",
                        "text_encoder/config.json", "text_encoder_2/config.json",
                        "transformer/config.json", "vae/config.json",
                        "tokenizer/tokenizer_config.json", "tokenizer_2/tokenizer_config.json"}) {
    EXPECT_EQ(Keys(ReadJson(tmp.sub("a") + "/" + f)), Keys(ReadJson(FixtureDir() + "/" + f))) << f;
  }
  // The default VAE leaves out the mid-block attention (configs.h), the rest is FLUX.1's layout.
  const auto vae = Headers(tmp.sub("a") + "/vae");
  EXPECT_FALSE(vae.empty());
  for (const auto& [name, entry] : vae) EXPECT_EQ(name.find(".attentions."), std::string::npos);
  EXPECT_TRUE(vae.count("encoder.conv_out.weight") && vae.count("decoder.conv_out.weight"));

  // A different seed changes the weights but nothing else.
  auto c = GenerateTinyModel(tmp.sub("c"), Options(6));
  ASSERT_TRUE(c.ok()) << c.status();
  const auto files_c = AllFiles(tmp.sub("c"));
  for (const auto& [name, bytes] : files_a) {
    const bool weights = name.find(".safetensors") != std::string::npos;
    EXPECT_EQ(files_c.at(name) == bytes, !weights) << name;
  }
}

TEST(TinyModelTest, BFloat16Weights) {
  TempDir tmp;
  TinyModelOptions options = Options(1);
  options.dtype = sharding::DType::kBF16;
  auto summary = GenerateTinyModel(tmp.sub("m"), options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  for (const char* c : {"text_encoder", "text_encoder_2", "transformer", "vae"}) {
    for (const auto& [name, entry] : Headers(tmp.sub("m") + "/" + c)) {
      EXPECT_EQ(entry.dtype, sharding::DType::kBF16) << c << "/" << name;
    }
  }
  EXPECT_EQ(ReadJson(tmp.sub("m") + "/text_encoder/config.json").at("dtype"), "bfloat16");
  EXPECT_EQ(ReadJson(tmp.sub("m") + "/text_encoder_2/config.json").at("dtype"), "bfloat16");
}

TEST(TinyModelTest, RefusesToOverwriteWithoutForce) {
  TempDir tmp;
  const std::string dir = tmp.sub("nested/model");  // parents are created
  ASSERT_TRUE(GenerateTinyModel(dir, Options(1)).ok());
  const auto before = AllFiles(dir);
  auto again = GenerateTinyModel(dir, Options(2));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
  EXPECT_TRUE(AllFiles(dir) == before);

  TinyModelOptions force = Options(2);
  force.force = true;
  ASSERT_TRUE(GenerateTinyModel(dir + "/", force).ok());
  EXPECT_FALSE(AllFiles(dir) == before);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(tmp.sub("nested"))) {
    entries.push_back(e.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"model"});  // no temporary or old folder left

  // An existing empty folder is filled without --force.
  fs::create_directories(tmp.sub("empty"));
  EXPECT_TRUE(GenerateTinyModel(tmp.sub("empty"), Options(1)).ok());
  EXPECT_TRUE(fs::exists(tmp.sub("empty/model_index.json")));
}

TEST(TinyModelTest, FailureLeavesNothingThatLooksLikeAModel) {
  TempDir tmp;
  TinyModelOptions options = Options(1);
  options.spm_trainer = "/nonexistent/ditserve-spm-train";
  auto result = GenerateTinyModel(tmp.sub("m"), options);
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(fs::exists(tmp.sub("m")));
  EXPECT_TRUE(fs::is_empty(tmp.path()));

  options = Options(1);
  options.configs.transformer["joint_attention_dim"] = 48;  // != T5 d_model
  result = GenerateTinyModel(tmp.sub("m"), options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(TinyModelTest, ClipBpeTrainerIsGreedyAndWellFormed) {
  auto files = TrainClipBpe("low low low lower lowest\nnewer newer wider\n", 6);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_FALSE(files->merges.empty());
  // "l o" occurs 5 times; then "w e" and "e r</w>" tie at 4 and "e r</w>" sorts first.
  EXPECT_EQ(files->merges[0], (std::pair<std::string, std::string>{"l", "o"}));
  EXPECT_EQ(files->merges[1], (std::pair<std::string, std::string>{"e", "r</w>"}));
  EXPECT_EQ(files->vocab.size(), 512 + files->merges.size() + 2);
  EXPECT_EQ(files->vocab[0], "!");
  EXPECT_EQ(files->vocab[256], "!</w>");
  EXPECT_EQ(files->vocab.back(), kClipEosToken);
  EXPECT_EQ(files->MergesText().rfind("#version: 0.2\nl o\ne r</w>\n", 0), 0u);
  const auto vocab_json = nlohmann::json::parse(files->VocabJson());
  EXPECT_EQ(vocab_json.size(), files->vocab.size());
  EXPECT_EQ(vocab_json.at("lo"), 512);
  // A corpus with nothing to merge stops early.
  auto none = TrainClipBpe("a b c\n", 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->merges.empty());
}

}  // namespace
}  // namespace ditserve::tiny_model
