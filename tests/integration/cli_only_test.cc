// ditserve-cli features the script clients do not have: precomputed embeddings, the unary call,
// writing the image to stdout, and command-line handling. Runs the real binary against the fake
// frontend (cli_fake_server.h).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "sharding/safetensors_writer.h"
#include "tests/integration/cli_fake_server.h"
#include "tests/integration/cli_test_env.h"
#include "tests/support/cli_subprocess.h"

namespace ditserve::testing {
namespace {

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeServer::Start();
    ASSERT_NE(server_, nullptr);
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
  }
  ProcessResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), CliBinary());
    return RunProcess(args, {}, 60);
  }
  std::unique_ptr<FakeServer> server_;
  std::string dir_;
};

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> ToFloats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST_F(CliTest, EmbeddingsAreSentAsFloat32Tensors) {
  std::vector<float> embeds = {0.5f, -1.25f, 3.0f, 4.5f, 5.0f, -6.0f};
  // bf16 of 1.0 and -2.0, and an int64 mask: the CLI converts both to float32.
  std::string pooled_bf16 = std::string("\x80\x3f\x00\xc0", 4);
  std::vector<int64_t> mask = {1, 1, 0};
  std::string mask_bytes(reinterpret_cast<const char*>(mask.data()), mask.size() * 8);
  std::string embeds_bytes = Floats(embeds);
  std::string path = dir_ + "/embeds.safetensors";
  ASSERT_TRUE(sharding::WriteSafetensors(
                  path, {{"prompt_embeds", sharding::DType::kF32, {1, 3, 2}, embeds_bytes.data()},
                         {"pooled_prompt_embeds", sharding::DType::kBF16, {1, 2}, pooled_bf16.data()},
                         {"text_mask", sharding::DType::kI64, {1, 3}, mask_bytes.data()}})
                  .ok());

  ProcessResult r = Cli({"generate", "--server", server_->address(), "--embeddings", path,
                         "--quiet", "-o", dir_ + "/e.png"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto req = server_->service().LastRequest();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->prompt(), "");
  const auto& e = req->prompt_embeddings();
  EXPECT_EQ(std::vector<int64_t>(e.prompt_embeds().shape().begin(), e.prompt_embeds().shape().end()),
            (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(e.prompt_embeds().dtype(), ditserve::v1::DTYPE_FLOAT32);
  EXPECT_EQ(ToFloats(e.prompt_embeds().data()), embeds);
  EXPECT_EQ(e.pooled_prompt_embeds().dtype(), ditserve::v1::DTYPE_FLOAT32);
  EXPECT_EQ(ToFloats(e.pooled_prompt_embeds().data()), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(ToFloats(e.text_mask().data()), (std::vector<float>{1.0f, 1.0f, 0.0f}));
  EXPECT_FALSE(req->has_negative_prompt_embeddings());
}

TEST_F(CliTest, EmbeddingsWithAnUnknownTensorAreRejectedLocally) {
  std::string bytes = Floats({1.0f});
  std::string path = dir_ + "/typo.safetensors";
  ASSERT_TRUE(sharding::WriteSafetensors(
                  path, {{"prompt_embed", sharding::DType::kF32, {1, 1, 1}, bytes.data()}})
                  .ok());
  ProcessResult r = Cli({"generate", "--server", server_->address(), "--embeddings", path,
                         "-o", dir_ + "/x.png"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "unexpected tensor 'prompt_embed'")) << r.err;
  EXPECT_FALSE(server_->service().LastRequest().has_value());

  ProcessResult missing = Cli({"generate", "--server", server_->address(), "--embeddings",
                               dir_ + "/absent.safetensors", "-o", dir_ + "/x.png"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(missing.err, "absent.safetensors")) << missing.err;
}

TEST_F(CliTest, UnaryCallWritesTheSameImage) {
  std::string out = dir_ + "/unary.png";
  ProcessResult r = Cli({"generate", "--server", server_->address(), "--prompt", "x", "--seed",
                         "9", "--unary", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(server_->service().unary_calls(), 1);
  EXPECT_EQ(server_->service().stream_calls(), 0);
  EXPECT_EQ(r.err, "");  // no progress without a stream
  EXPECT_EQ(ReadFileBytes(out), FakePng(kFakeDefaultSize, kFakeDefaultSize, 9));
}

TEST_F(CliTest, DashWritesTheImageToStdoutAndTheSummaryToStderr) {
  ProcessResult r = Cli({"generate", "--server", server_->address(), "--prompt", "x", "--seed",
                         "3", "--quiet", "-o", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, FakePng(kFakeDefaultSize, kFakeDefaultSize, 3));
  EXPECT_EQ(nlohmann::json::parse(r.err)["output"], "-");
}

// Output paths that are not plain files (a FIFO here; /dev/null in practice) are written in
// place: the atomic temp-file-and-rename of plain files must never replace them with a file.
TEST_F(CliTest, SpecialFilesAreWrittenInPlaceNotReplaced) {
  const std::string fifo = dir_ + "/image.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);  // blocks until the CLI opens it for writing
    received.assign(std::istreambuf_iterator<char>(in), {});
  });
  ProcessResult r = Cli({"generate", "--server", server_->address(), "--prompt", "x", "--seed",
                         "5", "--quiet", "-o", fifo});
  if (r.exit_code != 0) {
    std::ofstream(fifo, std::ios::binary).close();  // release the reader
  }
  reader.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(received, FakePng(kFakeDefaultSize, kFakeDefaultSize, 5));
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a regular file";
}

TEST_F(CliTest, NegativeAndSecondPromptsAndCfgAreSent) {
  ProcessResult r = Cli({"generate", "--server", server_->address(), "--prompt", "p1",
                         "--prompt-2", "p2", "--negative-prompt", "n1", "--negative-prompt-2",
                         "n2", "--true-cfg-scale", "4", "--max-sequence-length", "256",
                         "--quiet", "-o", dir_ + "/p.png"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto req = server_->service().LastRequest();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->prompt_2(), "p2");
  EXPECT_EQ(req->negative_prompt(), "n1");
  EXPECT_EQ(req->negative_prompt_2(), "n2");
  EXPECT_FLOAT_EQ(req->true_cfg_scale(), 4.0f);
  EXPECT_EQ(req->max_sequence_length(), 256u);
}

// --cache-threshold sets GenerateRequest.cache_threshold only when given (0 included: off), and the
// summary reports the response's full and cached transformer passes.
TEST_F(CliTest, CacheThresholdIsSentWhenGivenAndTheSummaryCountsThePasses) {
  ProcessResult on = Cli({"generate", "--server", server_->address(), "--prompt", "p", "--steps",
                          "5", "--cache-threshold", "0.12", "--quiet", "-o", dir_ + "/on.png"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  auto req = server_->service().LastRequest();
  ASSERT_TRUE(req.has_value());
  ASSERT_TRUE(req->has_cache_threshold());
  EXPECT_DOUBLE_EQ(req->cache_threshold(), 0.12);
  const nlohmann::json summary = nlohmann::json::parse(on.out);
  EXPECT_EQ(summary["timings"]["full_steps"], 1);
  EXPECT_EQ(summary["timings"]["cached_steps"], 4);

  ProcessResult off = Cli({"generate", "--server", server_->address(), "--prompt", "p", "--steps",
                           "5", "--cache-threshold", "0", "--quiet", "-o", dir_ + "/off.png"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  req = server_->service().LastRequest();
  ASSERT_TRUE(req->has_cache_threshold()) << "0 is sent: it turns off the server's default";
  EXPECT_EQ(req->cache_threshold(), 0.0);
  const nlohmann::json off_summary = nlohmann::json::parse(off.out);
  EXPECT_EQ(off_summary["timings"]["full_steps"], 5);
  EXPECT_EQ(off_summary["timings"]["cached_steps"], 0);

  ProcessResult absent = Cli({"generate", "--server", server_->address(), "--prompt", "p",
                              "--quiet", "-o", dir_ + "/absent.png"});
  ASSERT_EQ(absent.exit_code, 0) << absent.err;
  EXPECT_FALSE(server_->service().LastRequest()->has_cache_threshold());

  const int calls = server_->service().stream_calls();
  ProcessResult nan = Cli({"generate", "--server", server_->address(), "--prompt", "p",
                           "--cache-threshold", "nan", "-o", dir_ + "/nan.png"});
  EXPECT_EQ(nan.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(nan.err, "--cache-threshold must be a finite number")) << nan.err;
  EXPECT_EQ(server_->service().stream_calls(), calls) << "refused before any call";
}

TEST_F(CliTest, CommandLineErrors) {
  ProcessResult none = Cli({});
  EXPECT_EQ(none.exit_code, 2);
  ProcessResult unknown = Cli({"paint"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(unknown.err, "unknown command 'paint'")) << unknown.err;
  ProcessResult flag = Cli({"info", "--server", server_->address(), "--colour"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(flag.err, "unknown flag --colour")) << flag.err;
  ProcessResult steps = Cli({"generate", "--prompt", "x", "--steps", "-3", "-o", "x"});
  EXPECT_EQ(steps.exit_code, 2);
  ProcessResult timeout = Cli({"health", "--timeout", "0"});
  EXPECT_EQ(timeout.exit_code, 2);
  ProcessResult help = Cli({"generate", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.out, "--negative-prompt")) << help.out;
}

}  // namespace
}  // namespace ditserve::testing
