// The contract every ditserve client in this repository keeps (ditserve-cli, the Python client and
// the Node client), checked against the fake frontend in cli_fake_server.h by running the real
// client as a subprocess. The same flags and the same output contract hold for all three:
//   generate ... -o FILE   progress lines on stderr, one JSON summary line on stdout
//   info                   ModelInfo as JSON on stdout
//   health [--service S]   the status name on stdout; exit 0 only when SERVING
//   errors                 "error: CODE_NAME: message" on stderr; exit 1 (call failed), 2 (usage)
// Python runs with Debian's /usr/bin/python3 (skipped without python3-grpcio); Node is skipped
// unless deploy/clients/node/node_modules exists (the test never runs npm).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sharding/safetensors.h"
#include "tests/integration/cli_fake_server.h"
#include "tests/integration/cli_test_env.h"
#include "tests/support/cli_subprocess.h"

namespace ditserve::testing {
namespace {

struct Client {
  std::vector<std::string> argv_prefix;
  std::vector<std::string> env;
  std::string skip_reason;  // non-empty: not available here
};

Client MakeClient(const std::string& kind) {
  Client c;
  if (kind == "cli") {
    c.argv_prefix = {CliBinary()};
    if (!FileExists(CliBinary())) c.skip_reason = "ditserve-cli is not built";
  } else if (kind == "python") {
    c.argv_prefix = {kDebianPython, PythonClient()};
    c.env = {absl::StrCat("DITSERVE_PY_STUBS=", PythonStubsDir())};
    if (!FileExists(kDebianPython) ||
        RunProcess({kDebianPython, "-c", "import grpc, google.protobuf"}).exit_code != 0) {
      c.skip_reason = "Debian's python3-grpcio is not installed";
    } else if (!FileExists(PythonStubsDir() + "/ditserve/v1/ditserve_pb2.py")) {
      c.skip_reason = "Python stubs not generated (target ditserve_python_stubs)";
    }
  } else {
    c.argv_prefix = {"node", NodeClientDir() + "/ditserve_client.js"};
    if (!ProgramExists("node")) {
      c.skip_reason = "node is not installed";
    } else if (!FileExists(NodeClientDir() + "/node_modules/@grpc/grpc-js")) {
      c.skip_reason = "deploy/clients/node/node_modules is absent (run npm ci there)";
    }
  }
  return c;
}

class ClientContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    client_ = MakeClient(GetParam());
    if (!client_.skip_reason.empty()) GTEST_SKIP() << client_.skip_reason;
    server_ = FakeServer::Start();
    ASSERT_NE(server_, nullptr);
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
  }

  ProcessResult Run(std::vector<std::string> args) {
    std::vector<std::string> argv = client_.argv_prefix;
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult r = RunProcess(argv, client_.env, 60);
    EXPECT_FALSE(r.timed_out);
    return r;
  }

  Client client_;
  std::unique_ptr<FakeServer> server_;
  std::string dir_;
};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST_P(ClientContractTest, GeneratePngWritesTheServersBytesAndReportsEachStep) {
  std::string out = dir_ + "/cat.png";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "a red cat",
                         "--steps", "5", "--seed", "42", "--height", "32", "--width", "48",
                         "--guidance", "3.5", "--request-id", "req-png", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileBytes(out), FakePng(32, 48, 42));

  // stderr is a pipe: one stable line per event, in order.
  std::vector<std::string> lines = Lines(r.err);
  ASSERT_EQ(lines.size(), 6u) << r.err;
  EXPECT_EQ(lines[0], "queued position=0");
  for (int step = 1; step <= 5; ++step) {
    EXPECT_EQ(lines[step], absl::StrCat("step ", step, "/5 step_seconds=0.125 elapsed_seconds=",
                                        absl::StrFormat("%.3f", 0.125 * step)));
  }

  nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["output"], out);
  EXPECT_EQ(summary["format"], "png");
  EXPECT_EQ(summary["bytes"], FakePng(32, 48, 42).size());
  EXPECT_EQ(summary["request_id"], "req-png");
  EXPECT_EQ(summary["seed"], "42");
  EXPECT_EQ(summary["num_inference_steps"], 5);
  EXPECT_EQ(summary["height"], 32);
  EXPECT_EQ(summary["width"], 48);
  EXPECT_DOUBLE_EQ(summary["timings"]["total_seconds"].get<double>(), 0.75);

  std::optional<ditserve::v1::GenerateRequest> req = server_->service().LastRequest();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(server_->service().stream_calls(), 1);
  EXPECT_EQ(req->prompt(), "a red cat");
  EXPECT_EQ(req->num_inference_steps(), 5u);
  EXPECT_EQ(req->height(), 32u);
  EXPECT_EQ(req->width(), 48u);
  ASSERT_TRUE(req->has_seed());
  EXPECT_EQ(req->seed(), 42u);
  ASSERT_TRUE(req->has_guidance_scale());
  EXPECT_FLOAT_EQ(req->guidance_scale(), 3.5f);
  EXPECT_EQ(req->request_id(), "req-png");
  EXPECT_EQ(req->output_format(), ditserve::v1::OUTPUT_FORMAT_PNG);
}

TEST_P(ClientContractTest, OmittedOptionalFieldsAreNotSent) {
  std::string out = dir_ + "/default.png";
  ProcessResult r =
      Run({"generate", "--server", server_->address(), "--prompt", "x", "--quiet", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // --quiet
  std::optional<ditserve::v1::GenerateRequest> req = server_->service().LastRequest();
  ASSERT_TRUE(req.has_value());
  EXPECT_FALSE(req->has_seed());
  EXPECT_FALSE(req->has_guidance_scale());
  EXPECT_EQ(req->num_inference_steps(), 0u);
  EXPECT_EQ(req->height(), 0u);
  // The server's defaults come back in the summary.
  nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["seed"], std::to_string(kFakeDefaultSeed));
  EXPECT_EQ(summary["num_inference_steps"], kFakeDefaultSteps);
  EXPECT_EQ(ReadFileBytes(out), FakePng(kFakeDefaultSize, kFakeDefaultSize, kFakeDefaultSeed));
}

// --lora NAME[:SCALE], repeatable: sent in order, the scale only when given; a bad one exits 2
// without calling the server.
TEST_P(ClientContractTest, LoraFlagsBecomeTheRequestsLoras) {
  std::string out = dir_ + "/lora.png";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x", "--lora",
                         "style:0.8", "--lora", "detail", "--lora", "neg:-1.5", "--quiet", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::optional<ditserve::v1::GenerateRequest> req = server_->service().LastRequest();
  ASSERT_TRUE(req.has_value());
  ASSERT_EQ(req->loras_size(), 3);
  EXPECT_EQ(req->loras(0).name(), "style");
  ASSERT_TRUE(req->loras(0).has_scale());
  EXPECT_FLOAT_EQ(req->loras(0).scale(), 0.8f);
  EXPECT_EQ(req->loras(1).name(), "detail");
  EXPECT_FALSE(req->loras(1).has_scale());
  EXPECT_FLOAT_EQ(req->loras(2).scale(), -1.5f);

  const int calls = server_->service().stream_calls();
  ProcessResult bad = Run({"generate", "--server", server_->address(), "--prompt", "x", "--lora",
                           "style:abc", "-o", out});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("style:abc"), std::string::npos) << bad.err;
  EXPECT_EQ(server_->service().stream_calls(), calls);
}

TEST_P(ClientContractTest, RawFormatWritesAFloat32SafetensorsImage) {
  std::string out = dir_ + "/image.safetensors";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x", "--seed",
                         "7", "--height", "16", "--width", "32", "--format", "raw", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(server_->service().LastRequest()->output_format(),
            ditserve::v1::OUTPUT_FORMAT_RAW_F32);

  auto file = sharding::SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 1u);
  auto info = (*file)->Find("image");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)->dtype, sharding::DType::kF32);
  EXPECT_EQ((*info)->shape, (std::vector<int64_t>{16, 32, 3}));
  const uint8_t* data = (*file)->Data(**info);
  size_t i = 0;
  for (uint32_t y = 0; y < 16; ++y) {
    for (uint32_t x = 0; x < 32; ++x) {
      for (uint32_t c = 0; c < 3; ++c, ++i) {
        float v;
        std::memcpy(&v, data + i * sizeof(float), sizeof(v));
        ASSERT_EQ(v, FakeRawValue(y, x, c, 32, 7)) << "at " << y << "," << x << "," << c;
      }
    }
  }
  EXPECT_EQ((*file)->metadata().at("seed"), "7");
  EXPECT_EQ(nlohmann::json::parse(r.out)["format"], "raw");
}

TEST_P(ClientContractTest, LatentsFormatWritesTheLatentsTensor) {
  std::string out = dir_ + "/latents.safetensors";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x", "--height",
                         "32", "--width", "64", "--format", "latents", "--quiet", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto file = sharding::SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  auto info = (*file)->Find("latents");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)->dtype, sharding::DType::kF32);
  EXPECT_EQ((*info)->shape, (std::vector<int64_t>{1, 8, kFakeLatentChannels}));
  const uint8_t* data = (*file)->Data(**info);
  for (uint64_t i = 0; i < (*info)->numel(); ++i) {
    float v;
    std::memcpy(&v, data + i * sizeof(float), sizeof(v));
    ASSERT_EQ(v, FakeLatentValue(i)) << "at " << i;
  }
}

TEST_P(ClientContractTest, InvalidArgumentIsReportedWithTheServersMessage) {
  std::string out = dir_ + "/bad.png";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x", "--height",
                         "1000", "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(
      r.err, "error: INVALID_ARGUMENT: height/width: must be multiples of 16 and at most 2048, "
             "got 1000x32"))
      << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(FileExists(out));
}

TEST_P(ClientContractTest, FailureAfterSomeStepsWritesNothing) {
  server_->service().FailAfterStep(2);
  std::string out = dir_ + "/partial.png";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x", "--steps",
                         "4", "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "step 2/4")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "step 3/4")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "error: INTERNAL: worker 1 failed")) << r.err;
  EXPECT_FALSE(FileExists(out));
}

TEST_P(ClientContractTest, TimeoutBecomesDeadlineExceeded) {
  server_->service().SetStepDelayMs(400);
  std::string out = dir_ + "/slow.png";
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x", "--steps",
                         "20", "--timeout", "1", "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "error: DEADLINE_EXCEEDED")) << r.err;
  EXPECT_FALSE(FileExists(out));
}

TEST_P(ClientContractTest, UnreachableServerIsUnavailable) {
  // Start and stop a server to get a loopback port nobody listens on.
  std::string address = server_->address();
  server_.reset();
  ProcessResult r = Run({"health", "--server", address});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "error: UNAVAILABLE")) << r.err;
}

TEST_P(ClientContractTest, InfoPrintsModelInfoAsJson) {
  ProcessResult r = Run({"info", "--server", server_->address()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json info = nlohmann::json::parse(r.out);
  EXPECT_EQ(info["name"], "fake-flux1");
  EXPECT_EQ(info["family"], "flux1");
  EXPECT_EQ(info["tp_degree"], 2);
  EXPECT_EQ(info["guidance_distilled"], true);
  EXPECT_EQ(info["limits"]["max_height"], 2048);
  EXPECT_EQ(info["limits"]["size_multiple"], 16);
  EXPECT_EQ(info["defaults"]["num_inference_steps"], kFakeDefaultSteps);
  EXPECT_DOUBLE_EQ(info["defaults"]["guidance_scale"].get<double>(), 3.5);
  // int64 follows protobuf's JSON mapping (decimal strings); unset fields are present too.
  EXPECT_EQ(info["inputs"]["prompt_embeds_shape"], nlohmann::json({"1", "-1", "4096"}));
  EXPECT_EQ(info["inputs"]["requires_prompt_embeddings"], false);
}

TEST_P(ClientContractTest, HealthExitsZeroOnlyWhenServing) {
  ProcessResult serving = Run({"health", "--server", server_->address()});
  EXPECT_EQ(serving.exit_code, 0) << serving.err;
  EXPECT_EQ(serving.out, "SERVING\n");

  ProcessResult named = Run({"health", "--server", server_->address(), "--service",
                             "ditserve.v1.ImageGeneration"});
  EXPECT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(named.out, "SERVING\n");

  server_->SetServing(false);
  ProcessResult not_serving = Run({"health", "--server", server_->address(), "--timeout", "5"});
  EXPECT_EQ(not_serving.exit_code, 1);
  EXPECT_EQ(not_serving.out, "NOT_SERVING\n");

  ProcessResult unknown = Run({"health", "--server", server_->address(), "--service", "nope"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "error: NOT_FOUND")) << unknown.err;
}

TEST_P(ClientContractTest, BadCommandLineExitsTwoWithoutCallingTheServer) {
  ProcessResult r = Run({"generate", "--server", server_->address(), "--prompt", "x",
                         "--format", "jpeg", "-o", dir_ + "/x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "error: INVALID_ARGUMENT")) << r.err;
  ProcessResult no_output = Run({"generate", "--server", server_->address(), "--prompt", "x"});
  EXPECT_EQ(no_output.exit_code, 2);
  EXPECT_EQ(server_->service().stream_calls(), 0);
}

INSTANTIATE_TEST_SUITE_P(Clients, ClientContractTest,
                         ::testing::Values("cli", "python", "node"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ditserve::testing
