// End to end through the real binaries: ditserve-frontend spawning 2 CPU ditserve-worker processes
// (Gloo) on the flux1-tiny fixture, driven by the real clients (C++ CLI, Python) and by raw gRPC
// stubs. The fixture call must reproduce diffusers' image through the whole server.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ditserve/v1/ditserve.grpc.pb.h"
#include "sharding/safetensors.h"
#include "sharding/torch_tensor.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_png.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

using v1::GenerateEvent;
using v1::GenerateRequest;
using v1::GenerateResponse;

// A request that runs for a long time on the tiny model: many short steps (128 x 128 = 1024
// image tokens), so a cancellation takes effect within one short step.
GenerateRequest SlowRequest() {
  GenerateRequest r;
  r.set_prompt("a slow request");
  r.set_height(128);
  r.set_width(128);
  r.set_num_inference_steps(200);
  r.set_max_sequence_length(32);
  r.set_seed(1);
  return r;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "ditserve-e2e-" + std::to_string(::getpid()) + "-" + name;
}

class ServerE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ServerProcess::Start({"--model", FixturesDir() + "/flux1-tiny", "--spawn-workers",
                                        "2", "--max-queue", "2", "--log-level", "info"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    // Right after the port is bound the workers are still starting: not serving yet.
    first_health_ = server_->Health();
    ASSERT_TRUE(server_->WaitUntilServing(std::chrono::seconds(180)))
        << "never became SERVING; log: " << server_->log_path();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0)
          << "frontend did not exit cleanly; log: " << server_->log_path();
      delete server_;
      server_ = nullptr;
    }
  }
  std::unique_ptr<v1::ImageGeneration::Stub> Stub() {
    return v1::ImageGeneration::NewStub(server_->Channel());
  }
  grpc::Status Generate(const GenerateRequest& r, GenerateResponse* resp,
                        std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    return Stub()->Generate(&ctx, r, resp);
  }

  // The frontend's /metrics page, fetched with curl.
  static ProcessResult ScrapeMetrics() {
    return RunSystemProgram(
        {"/usr/bin/curl", "-s",
         "http://127.0.0.1:" + std::to_string(server_->metrics_port()) + "/metrics"},
        30);
  }
  // The value of one series of /metrics ("name" or "name{labels}" exactly as exposed), or "" when
  // absent.
  static std::string MetricValue(const std::string& series) {
    const ProcessResult body = ScrapeMetrics();
    for (absl::string_view line : absl::StrSplit(body.out, '\n')) {
      if (absl::ConsumePrefix(&line, series + " ")) return std::string(line);
    }
    return "";
  }

  static ServerProcess* server_;
  static std::string first_health_;
};

ServerProcess* ServerE2E::server_ = nullptr;
std::string ServerE2E::first_health_;

TEST_F(ServerE2E, HealthIsNotServingWhileLoadingThenServing) {
  EXPECT_EQ(first_health_, "NOT_SERVING");
  EXPECT_EQ(server_->Health(), "SERVING");
}

TEST_F(ServerE2E, ModelInfoDescribesTheGroup) {
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(Stub()->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.family(), "flux1");
  EXPECT_EQ(info.tp_degree(), 2u);
  EXPECT_EQ(info.dtype(), "float32");
  EXPECT_TRUE(info.guidance_distilled());
  EXPECT_EQ(info.limits().max_queue_length(), 2u);
  EXPECT_TRUE(info.inputs().accepts_text_prompt());
}

// The fixture call's generate arguments (flux1_call.json: 32x32, 4 steps, seed 42, guidance 3.5)
// for a client's `generate` subcommand, with `extra` (output flags) appended.
std::vector<std::string> FixtureGenerateArgs(std::vector<std::string> head,
                                             const std::string& server,
                                             const std::vector<std::string>& extra) {
  const std::vector<std::string> call = {"generate",
                                         "--server",
                                         server,
                                         "--prompt",
                                         Flux1CallArgs()["prompt"].get<std::string>(),
                                         "--height",
                                         "32",
                                         "--width",
                                         "32",
                                         "--steps",
                                         "4",
                                         "--seed",
                                         "42",
                                         "--guidance",
                                         "3.5",
                                         "--max-sequence-length",
                                         "32"};
  head.insert(head.end(), call.begin(), call.end());
  head.insert(head.end(), extra.begin(), extra.end());
  return head;
}

TEST_F(ServerE2E, CliGeneratesTheReferenceImage) {
  const std::string out = TempPath("cli.png");
  // --cache-threshold 0: the step cache off, as diffusers' reference ran (also the server's
  // default).
  ProcessResult r =
      RunProcess(FixtureGenerateArgs({BinaryDir() + "/cli/ditserve-cli"}, server_->address(),
                                     {"--cache-threshold", "0", "-o", out}),
                 {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One progress line per denoising step (stderr is not a TTY here).
  for (int step = 1; step <= 4; ++step) {
    EXPECT_NE(r.err.find("step " + std::to_string(step) + "/4"), std::string::npos) << r.err;
  }
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ExpectPngMatchesReference(bytes);
  const nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["timings"]["full_steps"], 4) << r.out;
  EXPECT_EQ(summary["timings"]["cached_steps"], 0) << r.out;
}

// The step cache through the real processes: the threshold reaches both ranks' pipelines, the
// counts add up to the steps (the first pass always runs in full), and the ranks' cached passes
// reach /metrics.
TEST_F(ServerE2E, CliStepCacheCountsItsPasses) {
  ProcessResult r = RunProcess(
      FixtureGenerateArgs({BinaryDir() + "/cli/ditserve-cli"}, server_->address(),
                          {"--cache-threshold", "1", "--quiet", "-o", TempPath("cached.png")}),
      {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json timings = nlohmann::json::parse(r.out)["timings"];
  const int full = timings["full_steps"].get<int>(), cached = timings["cached_steps"].get<int>();
  EXPECT_EQ(full + cached, 4) << r.out;
  EXPECT_GE(full, 1) << r.out;
  EXPECT_GE(cached, 1) << "threshold 1 caches some pass of flux1-tiny; " << r.out;
  for (const std::string rank : {"0", "1"}) {
    const std::string value =
        MetricValue("ditserve_worker_cached_steps_total{rank=\"" + rank + "\"}");
    ASSERT_FALSE(value.empty()) << "rank " << rank;
    EXPECT_EQ(std::stoi(value), cached) << "every rank counts the same; rank " << rank;
  }
  // Over the model's bound: refused naming the field, before any job.
  ProcessResult over = RunProcess(
      FixtureGenerateArgs({BinaryDir() + "/cli/ditserve-cli"}, server_->address(),
                          {"--cache-threshold", "1.5", "--quiet", "-o", TempPath("over.png")}),
      {}, 120);
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE(over.err.find("cache_threshold must be in 0..1"), std::string::npos) << over.err;
}

TEST_F(ServerE2E, CliRawOutputIsTheFloatImage) {
  const std::string out = TempPath("cli.safetensors");
  ProcessResult r =
      RunProcess(FixtureGenerateArgs({BinaryDir() + "/cli/ditserve-cli"}, server_->address(),
                                     {"--format", "raw", "--quiet", "-o", out}),
                 {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto tensors = sharding::ReadAllTensors(out);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_TRUE(tensors->count("image"));
  EXPECT_LT(RelativeError(tensors->at("image"), Ref("flux1.image")), 1e-3);
}

TEST_F(ServerE2E, PythonClientGeneratesAPng) {
  if (!ProgramExists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string out = TempPath("py.png");
  ProcessResult r = RunProcess(FixtureGenerateArgs({"/usr/bin/python3",
                                                    std::string(DITSERVE_SOURCE_DIR) +
                                                        "/deploy/clients/python/ditserve_client.py",
                                                    "--stubs", BinaryDir() + "/python"},
                                                   server_->address(), {"-o", out}),
                               {}, 120);
  if (r.exit_code != 0 && r.err.find("No module named 'grpc'") != std::string::npos) {
    GTEST_SKIP() << "python3-grpcio is not installed";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ExpectPngMatchesReference(bytes);
}

TEST_F(ServerE2E, StreamReportsQueuedEveryStepThenTheResult) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  GenerateRequest req = Flux1FixtureGenerateRequest();
  req.set_request_id("stream-test-1");
  auto reader = Stub()->GenerateStream(&ctx, req);
  GenerateEvent ev;
  std::vector<uint32_t> steps;
  bool queued = false, result = false;
  while (reader->Read(&ev)) {
    if (ev.has_queued()) queued = true;
    if (ev.has_progress()) {
      steps.push_back(ev.progress().step());
      EXPECT_EQ(ev.progress().total_steps(), 4u);
      EXPECT_GT(ev.progress().step_seconds(), 0.0);
    }
    if (ev.has_result()) {
      result = true;
      EXPECT_EQ(ev.result().request_id(), "stream-test-1");
      EXPECT_EQ(ev.result().seed(), 42u);
      EXPECT_GT(ev.result().timings().total_seconds(), ev.result().timings().denoise_seconds());
      ExpectPngMatchesReference(ev.result().image());
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(queued);
  EXPECT_TRUE(result);
  EXPECT_EQ(steps, (std::vector<uint32_t>{1, 2, 3, 4}));
}

TEST_F(ServerE2E, StreamCarriesPreviewsAndTheResultIsUnchanged) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  GenerateRequest req = Flux1FixtureGenerateRequest();
  req.set_preview_images(2);  // 4 steps: previews after steps 1 and 2
  auto reader = Stub()->GenerateStream(&ctx, req);
  GenerateEvent ev;
  std::vector<std::pair<uint32_t, uint32_t>> previews;  // (step, index)
  while (reader->Read(&ev)) {
    if (ev.has_progress() && !ev.progress().preview().empty()) {
      previews.emplace_back(ev.progress().step(), ev.progress().preview_index());
      EXPECT_EQ(ev.progress().preview().substr(1, 3), "PNG");
    }
    if (ev.has_result()) ExpectPngMatchesReference(ev.result().image());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(previews, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 0}, {2, 1}}));
  // The CLI writes them next to the image.
  const std::string out = TempPath("previews.png");
  ProcessResult r =
      RunProcess({BinaryDir() + "/cli/ditserve-cli", "generate", "--server", server_->address(),
                  "--prompt", "a cat", "--height", "32", "--width", "32", "--steps", "3",
                  "--max-sequence-length", "32", "--previews", "1", "--quiet", "-o", out},
                 {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream preview(TempPath("previews.preview-0.png"), std::ios::binary);
  EXPECT_TRUE(preview.good()) << "no preview file next to " << out;
  // Too many previews is refused naming the field; a unary call ignores them.
  GenerateRequest many = Flux1FixtureGenerateRequest();
  many.set_preview_images(4);
  grpc::ClientContext ctx2;
  GenerateResponse resp;
  grpc::Status s = Stub()->Generate(&ctx2, many, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("preview_images"), std::string::npos) << s.error_message();
  GenerateRequest unary = Flux1FixtureGenerateRequest();
  unary.set_preview_images(3);
  grpc::ClientContext ctx3;
  ASSERT_TRUE(Stub()->Generate(&ctx3, unary, &resp).ok());
  ExpectPngMatchesReference(resp.image());
}

TEST_F(ServerE2E, ValidationErrorsNameTheFieldAndLimit) {
  struct Case {
    std::function<void(GenerateRequest&)> edit;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](GenerateRequest& r) { r.set_height(100); }, "height must be a multiple of 16"},
      {[](GenerateRequest& r) { r.set_width(4096); }, "width must be a multiple of 16 in 16..2048"},
      {[](GenerateRequest& r) { r.set_num_inference_steps(201); },
       "num_inference_steps must be in 1..200"},
      {[](GenerateRequest& r) { r.set_guidance_scale(-2); }, "guidance_scale must be in 0..30"},
      {[](GenerateRequest& r) { r.set_max_sequence_length(600); },
       "max_sequence_length must be in 1..512"},
      {[](GenerateRequest& r) { r.set_prompt(std::string(10000, 'a')); },
       "prompt is 10000 bytes; the limit is 8192"},
      {[](GenerateRequest& r) { r.clear_prompt(); }, "prompt is required"},
      {[](GenerateRequest& r) {
         auto* t = r.mutable_prompt_embeddings()->mutable_prompt_embeds();
         t->add_shape(1);
         t->add_shape(8);
         t->add_shape(31);
         t->set_dtype(v1::DTYPE_FLOAT32);
         t->set_data(std::string(8 * 31 * 4, '\0'));
       },
       "prompt_embeddings.prompt_embeds.shape[2] must be 32, got 31"},
  };
  for (const auto& c : cases) {
    GenerateRequest r = Flux1FixtureGenerateRequest();
    c.edit(r);
    GenerateResponse resp;
    grpc::Status s = Generate(r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.needle;
    EXPECT_NE(s.error_message().find(c.needle), std::string::npos)
        << "message: " << s.error_message() << " expected: " << c.needle;
  }
}

// Starts a stream and waits for its first progress event (so it is running, not queued).
struct RunningStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<GenerateEvent>> reader;
};

std::unique_ptr<RunningStream> StartRunning(v1::ImageGeneration::Stub* stub,
                                            const GenerateRequest& req) {
  auto s = std::make_unique<RunningStream>();
  s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  s->reader = stub->GenerateStream(&s->ctx, req);
  GenerateEvent ev;
  while (s->reader->Read(&ev)) {
    if (ev.has_progress()) return s;
  }
  return nullptr;
}

TEST_F(ServerE2E, CancelledStreamIsFollowedByASuccessfulRequest) {
  auto stub = Stub();
  auto running = StartRunning(stub.get(), SlowRequest());
  ASSERT_NE(running, nullptr);
  running->ctx.TryCancel();
  EXPECT_EQ(running->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The ranks stop at the next step boundary, so the next request runs right away, not after the
  // remaining ~200 steps.
  const auto start = std::chrono::steady_clock::now();
  GenerateResponse resp;
  grpc::Status s = Generate(Flux1FixtureGenerateRequest(), &resp, std::chrono::seconds(60));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectPngMatchesReference(resp.image());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// Cancellation is collective: every rank stops at the same step boundary. Each rank's executed
// step counter (the workers' GetStatus `steps`, re-exported by the frontend's /metrics per rank)
// must grow by the same number of steps, fewer than the job had.
TEST_F(ServerE2E, CancellationStopsEveryRankAtTheSameStep) {
  auto rank_steps = [](int rank) {
    const std::string v =
        MetricValue("ditserve_worker_denoise_steps_total{rank=\"" + std::to_string(rank) + "\"}");
    return v.empty() ? -1.0 : std::stod(v);
  };
  const double before0 = rank_steps(0), before1 = rank_steps(1);
  ASSERT_GE(before0, 0) << "no per-rank step counter on /metrics";
  ASSERT_GE(before1, 0);

  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  auto reader = stub->GenerateStream(&ctx, SlowRequest());
  GenerateEvent ev;
  uint32_t seen = 0;
  while (seen < 3 && reader->Read(&ev)) {
    if (ev.has_progress()) seen = ev.progress().step();
  }
  ASSERT_GE(seen, 3u);
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The dispatcher runs one job at a time: once this request is done, the cancelled job has
  // ended on every rank.
  GenerateResponse resp;
  grpc::Status ok = Generate(Flux1FixtureGenerateRequest(), &resp, std::chrono::seconds(60));
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  const double steps0 = rank_steps(0) - before0, steps1 = rank_steps(1) - before1;
  const double fixture_steps = Flux1FixtureGenerateRequest().num_inference_steps();
  EXPECT_EQ(steps0, steps1) << "the ranks stopped at different steps";
  EXPECT_GE(steps0 - fixture_steps, seen);  // at least the steps the client saw
  EXPECT_LT(steps0 - fixture_steps, SlowRequest().num_inference_steps());
}

TEST_F(ServerE2E, DeadlineShorterThanTheJob) {
  GenerateResponse resp;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = Generate(SlowRequest(), &resp, std::chrono::milliseconds(1500));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The group is intact and free again.
  grpc::Status ok = Generate(Flux1FixtureGenerateRequest(), &resp, std::chrono::seconds(60));
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(server_->Health(), "SERVING");
}

TEST_F(ServerE2E, QueueOverflowIsResourceExhausted) {
  const std::string kDroppedCancelled = "ditserve_queue_dropped_total{reason=\"cancelled\"}";
  const int dropped_before = std::stoi(MetricValue(kDroppedCancelled));
  auto stub = Stub();
  auto running = StartRunning(stub.get(), SlowRequest());
  ASSERT_NE(running, nullptr);
  // Fill the queue (length 2) with two more requests, then one more must be refused.
  std::vector<std::unique_ptr<RunningStream>> queued;
  for (int i = 0; i < 2; ++i) {
    auto q = std::make_unique<RunningStream>();
    q->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    q->reader = stub->GenerateStream(&q->ctx, SlowRequest());
    GenerateEvent ev;
    ASSERT_TRUE(q->reader->Read(&ev));  // the Queued event: admitted
    EXPECT_TRUE(ev.has_queued());
    queued.push_back(std::move(q));
  }
  GenerateResponse resp;
  grpc::Status s = Generate(SlowRequest(), &resp, std::chrono::seconds(10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("queue length 2"), std::string::npos) << s.error_message();
  for (auto& q : queued) q->ctx.TryCancel();
  running->ctx.TryCancel();
  for (auto& q : queued) q->reader->Finish();
  running->reader->Finish();
  // The server learns of a client's cancel asynchronously (its handler polls every 50 ms); then the
  // queued requests leave the queue at once, not when the dispatcher next looks (the running job is
  // still stopping). Their slots must be free within a second.
  const auto cancelled_at = std::chrono::steady_clock::now();
  std::string depth;
  while (std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(5)) {
    depth = MetricValue("ditserve_queue_depth");
    if (depth == "0") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(depth, "0");
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled_at, std::chrono::seconds(1));
  EXPECT_EQ(std::stoi(MetricValue(kDroppedCancelled)), dropped_before + 2);
  grpc::Status ok = Generate(Flux1FixtureGenerateRequest(), &resp, std::chrono::seconds(60));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

TEST_F(ServerE2E, MetricsEndpointPassesPromtoolAndHasWorkerSeries) {
  ProcessResult body = ScrapeMetrics();
  ASSERT_EQ(body.exit_code, 0);
  EXPECT_NE(body.out.find("ditserve_worker_weight_bytes{rank=\"1\"}"), std::string::npos);
  EXPECT_NE(body.out.find("ditserve_worker_cached_steps_total{rank=\"1\"}"), std::string::npos);
  EXPECT_NE(body.out.find("ditserve_request_duration_seconds_bucket"), std::string::npos);
  if (!ProgramExists("/usr/bin/promtool")) GTEST_SKIP() << "promtool missing";
  const std::string path = TempPath("metrics.txt");
  std::ofstream(path) << body.out;
  ProcessResult check =
      RunProcess({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + path}, {}, 30);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

}  // namespace
}  // namespace ditserve::testing
