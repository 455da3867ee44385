// LoRA end to end through the real binaries: ditserve-frontend started with two adapters
// (--lora style=<diffusers-format folder>, --lora detail=<kohya file>) spawning 1, 2 and 4 CPU
// workers (Gloo; adapters merged, and at 2 also as runtime terms), driven by ditserve-cli: `generate --lora style:0.8` (and with two adapters) gives
// diffusers' image of load_lora_weights + set_adapters (tests/fixtures/make_lora_fixtures.py)
// within one 8-bit level at every degree; a request without adapters after them gives the base
// image; ModelInfo lists the adapters; bad choices are INVALID_ARGUMENT naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "sharding/torch_tensor.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_png.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

torch::Tensor LoraImage(const std::string& name) {
  auto all = sharding::ReadAllTensors(FixturesDir() + "/lora_reference.safetensors");
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok() || all->count(name) == 0) return {};
  return all->at(name);
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "ditserve-lora-e2e-" + std::to_string(::getpid()) + "-" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// (workers, --lora-mode).
class LoraE2E : public ::testing::TestWithParam<std::pair<int, std::string>> {
 protected:
  void SetUp() override {
    auto server = ServerProcess::Start(
        {"--model", FixturesDir() + "/flux1-tiny", "--spawn-workers", std::to_string(GetParam().first),
         "--lora-mode", GetParam().second,
         "--lora", "style=" + FixturesDir() + "/lora/style", "--lora",
         "detail=" + FixturesDir() + "/lora/detail.safetensors", "--max-batch", "2"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->WaitUntilServing(std::chrono::seconds(180)))
        << "never became SERVING; log: " << server_->log_path();
  }

  // `ditserve-cli generate` of the fixture call with extra arguments; the PNG's bytes.
  std::string Generate(const std::vector<std::string>& extra, const std::string& name) {
    const nlohmann::json c = Flux1CallArgs();
    const std::string out = TempPath(name + ".png");
    std::vector<std::string> argv = {BinaryDir() + "/cli/ditserve-cli", "generate", "--server",
                                     server_->address(), "--prompt", c["prompt"].get<std::string>(),
                                     "--height", "32", "--width", "32", "--steps", "4", "--seed", "42",
                                     "--guidance", "3.5", "--max-sequence-length", "32", "--quiet",
                                     "-o", out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ProcessResult r = RunProcess(argv, {}, 120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ReadFile(out);
  }

  std::unique_ptr<ServerProcess> server_;
};

TEST_P(LoraE2E, CliLoraChangesTheImageExactlyAsDiffusers) {
  ExpectPngMatchesReference(Generate({}, "base"));
  {
    SCOPED_TRACE("style:0.8");
    ExpectPngMatchesImage(Generate({"--lora", "style:0.8"}, "style"), LoraImage("lora.image.style_0.8"));
  }
  {
    SCOPED_TRACE("style:0.8 + detail:-0.5");
    ExpectPngMatchesImage(Generate({"--lora", "detail:-0.5", "--lora", "style:0.8"}, "both"),
                          LoraImage("lora.image.style_0.8+detail_-0.5"));
  }
  // The unadapted image after adapted requests, byte for byte what it was before.
  const std::string again = Generate({}, "base-again");
  ExpectPngMatchesReference(again);
  EXPECT_EQ(again, Generate({}, "base-third"));

  // /metrics counts the dispatched requests per adapter.
  if (!ProgramExists("/usr/bin/curl")) return;
  const ProcessResult page =
      RunSystemProgram({"/usr/bin/curl", "-s",
                        "http://127.0.0.1:" + std::to_string(server_->metrics_port()) + "/metrics"},
                       30);
  EXPECT_NE(page.out.find("ditserve_lora_requests_total{adapter=\"style\"} 2"), std::string::npos)
      << page.out;
  EXPECT_NE(page.out.find("ditserve_lora_requests_total{adapter=\"detail\"} 1"), std::string::npos);
}

// Requests with different adapter sets, queued together while another job runs (batching allowed
// up to 2): never one batch — the workers would refuse a job whose items disagree — and each gets
// its own image.
TEST_P(LoraE2E, DifferentAdapterSetsAreNotBatchedTogether) {
  if (GetParam().first != 2) GTEST_SKIP() << "once is enough";
  auto stub = v1::ImageGeneration::NewStub(server_->Channel());
  // A longer job (another shape: never batched with the two below) holds the group while they queue.
  grpc::ClientContext blocker_ctx;
  v1::GenerateRequest blocker = Flux1FixtureGenerateRequest();
  blocker.set_num_inference_steps(60);
  auto stream = stub->GenerateStream(&blocker_ctx, blocker);
  v1::GenerateEvent ev;
  while (stream->Read(&ev) && !ev.has_progress()) {
  }
  ASSERT_TRUE(ev.has_progress()) << "the blocking job never started";
  std::string pngs[2];
  grpc::Status status[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r = Flux1FixtureGenerateRequest();
      if (i == 0) {
        auto* c = r.add_loras();
        c->set_name("style");
        c->set_scale(0.8f);
      }
      grpc::ClientContext ctx;
      v1::GenerateResponse resp;
      status[i] = stub->Generate(&ctx, r, &resp);
      pngs[i] = resp.image();
    });
  }
  for (auto& t : threads) t.join();
  while (stream->Read(&ev)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(status[i].ok()) << i << ": " << status[i].error_message();
  ExpectPngMatchesImage(pngs[0], LoraImage("lora.image.style_0.8"));
  ExpectPngMatchesReference(pngs[1]);
}

// The Python client (Debian's python3-grpcio) with --lora gives the same image.
TEST_P(LoraE2E, PythonClientLoraGivesDiffusersImage) {
  if (GetParam().first != 2) GTEST_SKIP() << "once is enough: the client is the same at every degree";
  if (!ProgramExists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const nlohmann::json c = Flux1CallArgs();
  const std::string out = TempPath("py.png");
  ProcessResult r = RunProcess(
      {"/usr/bin/python3", std::string(DITSERVE_SOURCE_DIR) + "/deploy/clients/python/ditserve_client.py",
       "--stubs", BinaryDir() + "/python", "generate", "--server", server_->address(), "--prompt",
       c["prompt"].get<std::string>(), "--height", "32", "--width", "32", "--steps", "4", "--seed", "42",
       "--guidance", "3.5", "--max-sequence-length", "32", "--lora", "style:0.8", "-o", out},
      {}, 120);
  if (r.exit_code != 0 && r.err.find("No module named 'grpc'") != std::string::npos) {
    GTEST_SKIP() << "python3-grpcio is not installed";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectPngMatchesImage(ReadFile(out), LoraImage("lora.image.style_0.8"));
}

TEST_P(LoraE2E, ModelInfoListsTheAdaptersAndBadChoicesAreRefused) {
  auto stub = v1::ImageGeneration::NewStub(server_->Channel());
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    ASSERT_EQ(info.loras_size(), 2);
    std::map<std::string, v1::LoraInfo> by_name;
    for (const auto& l : info.loras()) by_name[l.name()] = l;
    EXPECT_EQ(by_name["style"].format(), "diffusers");
    EXPECT_EQ(by_name["detail"].format(), "kohya");
    EXPECT_GT(by_name["style"].modules(), 40u);
    EXPECT_EQ(by_name["detail"].rank(), 2u);
    EXPECT_GT(info.limits().max_loras_per_request(), 0u);
    EXPECT_GT(info.limits().max_lora_scale(), 0.0f);
  }
  auto refused = [&](const std::function<void(v1::GenerateRequest*)>& edit, const std::string& field) {
    v1::GenerateRequest r;
    r.set_prompt("x");
    r.set_height(32);
    r.set_width(32);
    r.set_num_inference_steps(1);
    edit(&r);
    grpc::ClientContext ctx;
    v1::GenerateResponse resp;
    const grpc::Status s = stub->Generate(&ctx, r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message();
  };
  refused([](v1::GenerateRequest* r) { r->add_loras()->set_name("nope"); }, "loras[0].name");
  refused([](v1::GenerateRequest* r) {
    auto* c = r->add_loras();
    c->set_name("style");
    c->set_scale(100);
  }, "loras[0].scale");
  refused([](v1::GenerateRequest* r) {
    r->add_loras()->set_name("style");
    r->add_loras()->set_name("style");
  }, "loras[1].name");
  // The CLI refuses a malformed flag before calling.
  ProcessResult bad = RunProcess({BinaryDir() + "/cli/ditserve-cli", "generate", "--server",
                                  server_->address(), "--prompt", "x", "--lora", "style:abc", "-o",
                                  TempPath("bad.png")},
                                 {}, 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("style:abc"), std::string::npos) << bad.err;
}

INSTANTIATE_TEST_SUITE_P(TpDegreesAndModes, LoraE2E,
                         ::testing::Values(std::make_pair(1, std::string("merge")),
                                           std::make_pair(2, std::string("merge")),
                                           std::make_pair(4, std::string("merge")),
                                           std::make_pair(2, std::string("runtime"))));

}  // namespace
}  // namespace ditserve::testing
