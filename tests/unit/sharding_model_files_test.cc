// Symbolic links in model folders (sharding/model_files.h): links inside the folder and into a
// Hugging Face cache snapshot's own blobs/ are followed; links that leave the folder are refused at
// open, naming the link, its target and the folder, before any file behind them is read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "sharding/checkpoint.h"
#include "sharding/model_files.h"
#include "sharding/pipeline_index.h"
#include "tests/support/fixtures.h"
#include "tests/unit/sharding_test_util.h"

namespace ditserve::sharding {
namespace {

namespace fs = std::filesystem;
using ::ditserve::testing::TempDir;
using ::ditserve::testing::WriteTextFile;
using ::testing::HasSubstr;

std::string Fixture(const std::string& rel) { return ditserve::testing::FixturesDir() + rel; }

// A copy of the flux1-tiny transformer folder at `dst`.
void CopyTransformer(const fs::path& dst) {
  fs::create_directories(dst);
  fs::copy(Fixture("/flux1-tiny/transformer"), dst, fs::copy_options::recursive);
}

TEST(ModelFilesTest, FixtureFoldersPass) {
  EXPECT_TRUE(CheckModelFolderLinks(Fixture("/flux1-tiny")).ok());
  EXPECT_TRUE(CheckComponentFolderLinks(Fixture("/flux1-tiny/transformer")).ok());
  EXPECT_TRUE(ReadPipelineIndex(Fixture("/flux1-tiny")).ok());
}

TEST(ModelFilesTest, LinksInsideTheFolderAreFollowed) {
  TempDir tmp;
  const fs::path model = fs::path(tmp.path()) / "model";
  CopyTransformer(model / "weights");
  // transformer -> weights (a folder link inside), and a file link inside.
  fs::create_directory_symlink("weights", model / "transformer");
  fs::create_symlink("transformer/config.json", model / "alias.json");
  EXPECT_TRUE(CheckModelFolderLinks(model.string()).ok());
  auto ckpt = ComponentCheckpoint::Open((model / "transformer").string());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
}

TEST(ModelFilesTest, AWeightFileLinkLeavingTheFolderIsRefusedNamingIt) {
  TempDir tmp;
  const fs::path outside = fs::path(tmp.path()) / "secret.safetensors";
  WriteTextFile(outside.string(), "not weights");
  const fs::path dir = fs::path(tmp.path()) / "model" / "transformer";
  CopyTransformer(dir);
  const fs::path weight = dir / "diffusion_pytorch_model-00001-of-00016.safetensors";
  ASSERT_TRUE(fs::exists(weight));
  fs::remove(weight);
  fs::create_symlink(outside, weight);
  auto ckpt = ComponentCheckpoint::Open(dir.string());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ckpt.status().message()),
              HasSubstr("diffusion_pytorch_model-00001-of-00016.safetensors: symbolic link to '" +
                        fs::canonical(outside).string() + "', which is outside the model folder"));
}

TEST(ModelFilesTest, RelativeDotDotAndFolderLinksLeavingThePipelineAreRefused) {
  TempDir tmp;
  const fs::path elsewhere = fs::path(tmp.path()) / "elsewhere";
  CopyTransformer(elsewhere);
  const fs::path root = fs::path(tmp.path()) / "pipeline";
  fs::create_directories(root);
  fs::copy_file(Fixture("/flux1-tiny/model_index.json"), root / "model_index.json");
  // A component folder that is a link out of the pipeline root, written relative with "..".
  fs::create_directory_symlink("../elsewhere", root / "transformer");
  auto index = ReadPipelineIndex(root.string());
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("transformer: symbolic link to"));
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("outside the model folder"));
  auto component = ReadComponentConfig((root / "transformer").string());
  ASSERT_FALSE(component.ok());
  EXPECT_EQ(component.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ModelFilesTest, AConfigLinkToAnAbsoluteSystemPathIsRefused) {
  TempDir tmp;
  const fs::path dir = fs::path(tmp.path()) / "transformer";
  CopyTransformer(dir);
  fs::remove(dir / "config.json");
  fs::create_symlink("/etc/hostname", dir / "config.json");
  auto config = ReadComponentConfig(dir.string());
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("config.json: symbolic link to"));
}

TEST(ModelFilesTest, HubCacheSnapshotMayLinkIntoItsOwnBlobsOnly) {
  TempDir tmp;
  const fs::path repo = fs::path(tmp.path()) / "models--org--tiny";
  const fs::path blobs = repo / "blobs";
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  fs::create_directories(blobs);
  fs::create_directories(snapshot / "transformer");
  // Every file of the snapshot is a relative link into ../../blobs, as huggingface_hub writes it.
  int i = 0;
  for (const auto& entry : fs::directory_iterator(Fixture("/flux1-tiny/transformer"))) {
    const std::string blob = "blob" + std::to_string(i++);
    fs::copy_file(entry.path(), blobs / blob);
    fs::create_symlink("../../../blobs/" + blob, snapshot / "transformer" / entry.path().filename());
  }
  EXPECT_EQ(*ModelTrustRoot(snapshot.string()), fs::canonical(repo).string());
  auto ckpt = ComponentCheckpoint::Open((snapshot / "transformer").string());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();

  // Another repository's blobs are outside.
  const fs::path other = fs::path(tmp.path()) / "models--org--other" / "blobs";
  fs::create_directories(other);
  WriteTextFile((other / "x").string(), "{}");
  fs::create_symlink(other / "x", snapshot / "transformer" / "extra.json");
  auto refused = ComponentCheckpoint::Open((snapshot / "transformer").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("extra.json: symbolic link"));
}

TEST(ModelFilesTest, LinkLoopsAreRefusedAndCyclesInsideAreWalkedOnce) {
  TempDir tmp;
  const fs::path dir = fs::path(tmp.path()) / "transformer";
  CopyTransformer(dir);
  // A folder link back to an ancestor inside the folder: walked once, accepted.
  fs::create_directories(dir / "sub");
  fs::create_directory_symlink("..", dir / "sub" / "up");
  EXPECT_TRUE(CheckComponentFolderLinks(dir.string()).ok());
  // A link loop never resolves: refused as unresolvable rather than followed.
  fs::create_symlink("b", dir / "a");
  fs::create_symlink("a", dir / "b");
  absl::Status s = CheckComponentFolderLinks(dir.string());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("unresolvable"));
}

}  // namespace
}  // namespace ditserve::sharding
