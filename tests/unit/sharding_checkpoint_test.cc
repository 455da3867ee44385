// Checkpoint discovery (the diffusers checkpoint layout: pipeline_utils.py, modeling_utils.py): fixtures, pipeline roots, and every refusal with a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "sharding/checkpoint.h"
#include "sharding/pipeline_index.h"
#include "sharding/safetensors_writer.h"
#include "tests/support/fixtures.h"
#include "tests/unit/sharding_test_util.h"

namespace ditserve::sharding {
namespace {

using ::ditserve::testing::TempDir;
using ::ditserve::testing::WriteTextFile;
using ::testing::HasSubstr;

std::string Fixture(const std::string& rel) { return ditserve::testing::FixturesDir() + rel; }

TEST(CheckpointTest, ShardedFixtureFollowsTheIndex) {
  const std::string dir = Fixture("/flux1-tiny/transformer");
  auto ckpt = ComponentCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->class_name(), "FluxTransformer2DModel");
  EXPECT_THAT((*ckpt)->index_file(), HasSubstr("diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_EQ((*ckpt)->weight_files().size(), 16u);
  // The weight_map keys are the tensor list.
  std::ifstream in(dir + "/diffusion_pytorch_model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ((*ckpt)->tensors().size(), index["weight_map"].size());
  EXPECT_EQ((*ckpt)->total_bytes(), index["metadata"]["total_size"].get<uint64_t>());
  auto loc = (*ckpt)->Find("single_transformer_blocks.0.proj_out.weight");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->info->shape, (std::vector<int64_t>{64, 320}));
  auto missing = (*ckpt)->Find("nope.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, SingleFileFixturesAndTextEncoders) {
  for (const char* rel : {"/flux2-tiny/transformer", "/qwenimage-tiny/transformer",
                          "/flux1-tiny/vae", "/flux1-tiny/text_encoder",
                          "/flux1-tiny/text_encoder_2"}) {
    SCOPED_TRACE(rel);
    auto ckpt = ComponentCheckpoint::Open(Fixture(rel));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_TRUE((*ckpt)->index_file().empty());
    EXPECT_EQ((*ckpt)->weight_files().size(), 1u);
    EXPECT_FALSE((*ckpt)->tensors().empty());
  }
}

TEST(CheckpointTest, PipelineRoot) {
  const std::string root = Fixture("/flux1-tiny");
  ASSERT_TRUE(IsPipelineRoot(root));
  EXPECT_FALSE(IsPipelineRoot(root + "/transformer"));
  auto index = ReadPipelineIndex(root);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->class_name, "FluxPipeline");
  const PipelineComponent* t = index->Find("transformer");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->library, "diffusers");
  EXPECT_EQ(t->class_name, "FluxTransformer2DModel");
  ASSERT_NE(index->Find("text_encoder_2"), nullptr);
  EXPECT_EQ(index->Find("text_encoder_2")->class_name, "T5EncoderModel");
  EXPECT_EQ(index->Find("image_encoder"), nullptr);  // [null, null]
  EXPECT_EQ(index->components.size(), 7u);
  auto dir = ResolveComponentDir(root, "transformer");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, root + "/transformer");
  auto same = ResolveComponentDir(root + "/vae", "transformer");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, root + "/vae");
  EXPECT_EQ(ResolveComponentDir(root, "image_encoder").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, PipelineIndexErrors) {
  TempDir dir;
  WriteTextFile(dir.File("model_index.json"), R"({"_class_name": "X", "vae": ["diffusers"]})");
  auto r = ReadPipelineIndex(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("model_index.json"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'vae'"));
  WriteTextFile(dir.File("model_index.json"), "{");
  EXPECT_FALSE(ReadPipelineIndex(dir.path()).ok());
}

// A valid single-tensor component to break in various ways.
void MakeComponent(const std::string& dir, const std::string& config = R"({"_class_name":"M"})") {
  std::filesystem::create_directories(dir);
  WriteTextFile(dir + "/config.json", config);
}

void WriteShard(const std::string& path, const std::vector<std::string>& names) {
  static const std::vector<float> data(4, 1.f);
  std::vector<TensorToWrite> ts;
  for (const auto& n : names) ts.push_back({n, DType::kF32, {4}, data.data()});
  ASSERT_TRUE(WriteSafetensors(path, ts).ok());
}

absl::Status OpenStatus(const std::string& dir) {
  auto c = ComponentCheckpoint::Open(dir);
  return c.ok() ? absl::OkStatus() : c.status();
}

TEST(CheckpointTest, Refusals) {
  TempDir tmp;
  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;
    absl::StatusCode code;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"not a directory", [](const std::string&) {}, absl::StatusCode::kNotFound,
       {"not a directory"}},
      {"missing config",
       [](const std::string& d) {
         std::filesystem::create_directories(d);
         WriteShard(d + "/diffusion_pytorch_model.safetensors", {"w"});
       },
       absl::StatusCode::kNotFound, {"config.json", "missing"}},
      {"bad config",
       [](const std::string& d) { MakeComponent(d, "{nope"); },
       absl::StatusCode::kInvalidArgument, {"config.json", "not valid JSON"}},
      {"quantized",
       [](const std::string& d) {
         MakeComponent(d, R"({"quantization_config": {"quant_method": "bitsandbytes"}})");
         WriteShard(d + "/diffusion_pytorch_model.safetensors", {"w"});
       },
       absl::StatusCode::kFailedPrecondition, {"config.json", "quantization_config", "bitsandbytes"}},
      {"bin weights",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/diffusion_pytorch_model.bin", "pickle");
       },
       absl::StatusCode::kFailedPrecondition, {"diffusion_pytorch_model.bin", "pickle"}},
      {"pt weights",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/model.pt", "pickle");
       },
       absl::StatusCode::kFailedPrecondition, {"model.pt"}},
      {"ckpt weights",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/model.ckpt", "pickle");
       },
       absl::StatusCode::kFailedPrecondition, {"model.ckpt"}},
      {"pth weights",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/model.pth", "pickle");
       },
       absl::StatusCode::kFailedPrecondition, {"model.pth"}},
      {"no weights", [](const std::string& d) { MakeComponent(d); }, absl::StatusCode::kNotFound,
       {"no weights"}},
      {"ambiguous singles",
       [](const std::string& d) {
         MakeComponent(d);
         WriteShard(d + "/a.safetensors", {"w"});
         WriteShard(d + "/b.safetensors", {"v"});
       },
       absl::StatusCode::kFailedPrecondition, {"a.safetensors, b.safetensors"}},
      {"missing shard",
       [](const std::string& d) {
         MakeComponent(d);
         WriteShard(d + "/s-00001-of-00002.safetensors", {"a"});
         WriteTextFile(d + "/diffusion_pytorch_model.safetensors.index.json",
                       R"({"weight_map": {"a": "s-00001-of-00002.safetensors",
                                          "b": "s-00002-of-00002.safetensors"}})");
       },
       absl::StatusCode::kNotFound,
       {"diffusion_pytorch_model.safetensors.index.json", "s-00002-of-00002.safetensors", "'b'"}},
      {"tensor not in its shard",
       [](const std::string& d) {
         MakeComponent(d);
         WriteShard(d + "/s1.safetensors", {"a"});
         WriteShard(d + "/s2.safetensors", {"b"});
         WriteTextFile(d + "/diffusion_pytorch_model.safetensors.index.json",
                       R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
       },
       absl::StatusCode::kDataLoss, {"index.json", "'b'", "s1.safetensors", "no such tensor"}},
      {"shard outside the folder",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/model.safetensors.index.json",
                       R"({"weight_map": {"a": "../x.safetensors"}})");
       },
       absl::StatusCode::kInvalidArgument, {"model.safetensors.index.json", "not a plain file name"}},
      {"pickle shard in index",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/model.safetensors.index.json",
                       R"({"weight_map": {"a": "pytorch_model-00001-of-00001.bin"}})");
       },
       absl::StatusCode::kFailedPrecondition, {"pytorch_model-00001-of-00001.bin"}},
      {"index without weight_map",
       [](const std::string& d) {
         MakeComponent(d);
         WriteTextFile(d + "/diffusion_pytorch_model.safetensors.index.json", R"({"metadata": {}})");
       },
       absl::StatusCode::kInvalidArgument, {"weight_map"}},
      {"corrupt shard",
       [](const std::string& d) {
         MakeComponent(d);
         ditserve::testing::WriteRawSafetensors(d + "/diffusion_pytorch_model.safetensors",
                                                R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                                "short");
       },
       absl::StatusCode::kDataLoss, {"diffusion_pytorch_model.safetensors", "'w'"}},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = tmp.File("c" + std::to_string(i++));
    c.make(dir);
    absl::Status s = OpenStatus(dir);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(dir)) << s;
    for (const auto& m : c.message) EXPECT_THAT(std::string(s.message()), HasSubstr(m));
  }
}

TEST(CheckpointTest, PrefersSafetensorsAndIndex) {
  TempDir tmp;
  const std::string d = tmp.File("m");
  MakeComponent(d);
  WriteTextFile(d + "/diffusion_pytorch_model.bin", "pickle");  // ignored next to safetensors
  WriteShard(d + "/diffusion_pytorch_model.safetensors", {"single"});
  WriteShard(d + "/diffusion_pytorch_model-00001-of-00001.safetensors", {"a", "b"});
  WriteTextFile(d + "/diffusion_pytorch_model.safetensors.index.json",
                R"({"weight_map": {"a": "diffusion_pytorch_model-00001-of-00001.safetensors"}})");
  auto ckpt = ComponentCheckpoint::Open(d);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ((*ckpt)->tensors().size(), 1u);  // weight_map keys only
  EXPECT_EQ((*ckpt)->tensors().begin()->first, "a");
  std::filesystem::remove(d + "/diffusion_pytorch_model.safetensors.index.json");
  ckpt = ComponentCheckpoint::Open(d);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->tensors().count("single"));
}

}  // namespace
}  // namespace ditserve::sharding
