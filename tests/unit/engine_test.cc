// The worker engine: every job runs on the one engine thread with the rank's device current (a CPU
// fake of the device binding records, per thread, what is current), the typed-job edge turns
// exceptions into statuses (out of memory: RESOURCE_EXHAUSTED and the worker keeps serving), and
// Status/Cancel answer while a job runs. Progress leaves the engine thread through a ProgressQueue:
// a reader that stalls in its write neither blocks the engine thread nor changes the step times,
// loses only intermediate events, and only rank 0 streams steps. The real FLUX.1 pipeline on the
// fixture runs through the engine and the worker's codec into a PNG within one level of diffusers'
// image.
#include <gtest/gtest.h>
#include <png.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "pipeline/warmup_job.h"
#include "tests/support/fixture_jobs.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "tests/support/step_observer.h"
#include "worker/engine.h"
#include "worker/engine_thread.h"
#include "comm/local_communicator.h"
#include "worker/job_codec.h"
#include "worker/progress_queue.h"

namespace ditserve::worker {
namespace {

using ::ditserve::testing::StepObserver;

using ::ditserve::testing::FixturesDir;
using ::ditserve::testing::Ref;

// A device that is "current" only on the threads that bound it.
thread_local int t_current_device = -1;

class FakeBinding final : public DeviceBinding {
 public:
  explicit FakeBinding(int index) : index_(index) {}
  torch::Device device() const override { return torch::kCPU; }
  absl::Status Bind() override {
    t_current_device = index_;
    ++binds;
    return absl::OkStatus();
  }
  bool IsCurrent() const override { return t_current_device == index_; }
  std::atomic<int> binds{0};

 private:
  int index_;
};

// The binding the engine got, shared with the test.
struct BindingProbe {
  FakeBinding* binding = nullptr;
  DeviceBindingFactory Factory(int index) {
    return [this, index](DeviceKind, uint32_t, int64_t)
               -> absl::StatusOr<std::unique_ptr<DeviceBinding>> {
      auto b = std::make_unique<FakeBinding>(index);
      binding = b.get();
      return std::unique_ptr<DeviceBinding>(std::move(b));
    };
  }
};

v1::InitRequest InitFor(const std::string& model_dir) {
  v1::InitRequest r;
  r.set_rank(0);
  r.mutable_rendezvous()->set_world_size(1);
  r.set_model_dir(model_dir);
  r.set_device("cpu");
  r.set_dtype("float32");
  return r;
}

// InitRequest through the codec and the engine as the service does; `phases` (if given) receives
// every event's phase, "ready" last on success.
absl::StatusOr<InitReport> InitWith(Engine& engine, const v1::InitRequest& request,
                                    std::vector<std::string>* phases = nullptr) {
  absl::StatusOr<InitConfig> config = InitConfigFromRequest(request);
  if (!config.ok()) return config.status();
  ProgressQueue<InitProgress> progress(64);
  auto done = engine.Init(*std::move(config), &progress);
  progress.Drain([&](const InitProgress& p) {
    if (phases != nullptr) phases->push_back(InitEventFromProgress(p).phase());
    return true;
  });
  absl::StatusOr<InitReport> report = done.get();
  if (report.ok() && phases != nullptr) phases->push_back(ReadyEvent(*report).phase());
  return report;
}

absl::Status Init(Engine& engine, const std::string& model_dir) {
  return InitWith(engine, InitFor(model_dir)).status();
}

// One job, waited for; its step events (rank 0's) land in *steps when given.
absl::StatusOr<pipeline::GenerationResult> RunAndWait(Engine& engine, RunJob job,
                                                      std::vector<pipeline::StepEvent>* steps = nullptr) {
  ProgressQueue<pipeline::StepEvent> progress(1024);
  auto done = engine.Run(std::move(job), &progress, {});
  progress.Drain([&](const pipeline::StepEvent& e) {
    if (steps != nullptr) steps->push_back(e);
    return true;
  });
  return done.get();
}

// A pipeline whose Run does what the test says.
class ScriptedPipeline final : public pipeline::Pipeline {
 public:
  explicit ScriptedPipeline(std::function<absl::StatusOr<pipeline::GenerationResult>()> run)
      : run_(std::move(run)) {
    card_.name = "scripted";
    card_.family = "flux1";
  }
  const pipeline::ModelCard& Card() const override { return card_; }
  absl::StatusOr<pipeline::GenerationResult> Run(const pipeline::GenerationJob&,
                                                 const pipeline::StepCallback&,
                                                 const pipeline::CancelPredicate&) override {
    return run_();
  }
  uint64_t weight_bytes() const override { return 1; }
  models::StepGraphStats transformer_graph_stats() const override { return {}; }

 private:
  std::function<absl::StatusOr<pipeline::GenerationResult>()> run_;
  pipeline::ModelCard card_;
};

EngineDeps ScriptedDeps(BindingProbe* probe,
                        std::function<absl::StatusOr<pipeline::GenerationResult>()> run) {
  EngineDeps deps;
  deps.bind_device = probe->Factory(3);
  deps.load_pipeline = [run](const pipeline::PipelineOptions&, comm::Communicator*)
      -> absl::StatusOr<std::unique_ptr<pipeline::Pipeline>> {
    return std::unique_ptr<pipeline::Pipeline>(new ScriptedPipeline(run));
  };
  return deps;
}

RunJob AnyJob(const std::string& id = "job") {
  RunJob job;
  job.job_id = id;
  job.job.items.resize(1);
  return job;
}

TEST(EngineThread, RunsJobsInOrderOnItsOwnThread) {
  EngineThread engine;
  std::vector<int> order;
  std::thread::id seen;
  EXPECT_FALSE(engine.IsEngineThread());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(engine.Call([&] {
      order.push_back(i);
      if (i == 0) seen = std::this_thread::get_id();
      EXPECT_EQ(std::this_thread::get_id(), seen);
      return engine.IsEngineThread();
    }));
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(seen, std::this_thread::get_id());
}

TEST(Engine, EveryStepOfARealJobRunsOnTheEngineThreadWithTheDeviceCurrent) {
  BindingProbe probe;
  std::atomic<int> steps{0}, current{0};
  EngineDeps deps;
  deps.bind_device = probe.Factory(1);
  deps.load_pipeline = [&](const pipeline::PipelineOptions& o, comm::Communicator* c)
      -> absl::StatusOr<std::unique_ptr<pipeline::Pipeline>> {
    auto inner = pipeline::LoadPipeline(o, c);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<pipeline::Pipeline>(new StepObserver(*std::move(inner), [&] {
      ++steps;
      current += probe.binding->IsCurrent() ? 1 : 0;
    }));
  };
  Engine engine(WorkerOptions{}, deps);
  ASSERT_TRUE(Init(engine, FixturesDir() + "/flux1-tiny").ok());
  ASSERT_NE(probe.binding, nullptr);
  EXPECT_EQ(probe.binding->binds.load(), 1);
  // The test threads never bound the device; the job must not run on them.
  EXPECT_FALSE(probe.binding->IsCurrent());
  for (int caller = 0; caller < 2; ++caller) {
    steps = 0;
    current = 0;
    std::thread t([&] {
      std::vector<pipeline::StepEvent> events;
      auto r = RunAndWait(engine, {"real", ditserve::testing::Flux1FixtureJob(pipeline::JobOutput::kImage)},
                          &events);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(steps.load(), 4);
      EXPECT_EQ(current.load(), 4) << "a step ran without the rank's device current";
      ASSERT_EQ(events.size(), 4u);  // rank 0 streams every step
      EXPECT_EQ(events.back().step, 4u);
      ASSERT_EQ(r->images.size(), 1u);
      EXPECT_LT(ditserve::testing::RelativeError(r->images[0], Ref("flux1.image")), 1e-3);
    });
    t.join();
  }
}

TEST(Engine, ThroughTheCodecThePngIsWithinOneLevelOfDiffusers) {
  BindingProbe probe;
  EngineDeps deps;
  deps.bind_device = probe.Factory(0);
  Engine engine(WorkerOptions{}, deps);
  ASSERT_TRUE(Init(engine, FixturesDir() + "/flux1-tiny").ok());
  const v1::RunRequest request = ditserve::testing::Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_PNG);
  auto job = JobFromRunRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  auto generated = RunAndWait(engine, RunJob{"png", *job});
  ASSERT_TRUE(generated.ok()) << generated.status();
  auto result = RunResultFromGeneration(request, *generated, *engine.Card());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs_size(), 1);
  const auto& item = result->outputs(0);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_memory(&image, item.image().data(), item.image().size()));
  image.format = PNG_FORMAT_RGB;
  torch::Tensor png = torch::empty({image.height, image.width, 3}, torch::kUInt8);
  ASSERT_TRUE(png_image_finish_read(&image, nullptr, png.data_ptr(), 0, nullptr));
  torch::Tensor ref = (Ref("flux1.image") * 255).round().to(torch::kInt32);
  ASSERT_EQ(png.sizes(), ref.sizes());
  EXPECT_LE((png.to(torch::kInt32) - ref).abs().max().item<int>(), 1);
  EXPECT_GT(result->denoise_seconds(), 0);
}

// --warmup: the warm-up job runs inside Init, after loading and before "ready", and leaves no trace:
// the next job's image is bit-identical to a cold engine's.
TEST(Engine, TheWarmUpJobRunsBeforeReadyAndChangesNoResult) {
  const v1::RunRequest request = ditserve::testing::Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_RAW_F32);
  auto job = JobFromRunRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  torch::Tensor images[2];
  for (int warm = 0; warm < 2; ++warm) {
    BindingProbe probe;
    EngineDeps deps;
    deps.bind_device = probe.Factory(0);
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest init = InitFor(FixturesDir() + "/flux1-tiny");
    init.set_warmup(warm == 1);
    init.set_warmup_height(32);
    init.set_warmup_width(48);
    std::vector<std::string> phases;
    ASSERT_TRUE(InitWith(engine, init, &phases).ok());
    const auto warmup = std::find(phases.begin(), phases.end(), "warmup");
    EXPECT_EQ(warmup != phases.end(), warm == 1);
    if (warm == 1) {
      EXPECT_EQ(std::find(warmup, phases.end(), "ready") - warmup, 1);
    }
    auto generated = RunAndWait(engine, RunJob{"after", *job});
    ASSERT_TRUE(generated.ok()) << generated.status();
    ASSERT_EQ(generated->images.size(), 1u);
    images[warm] = generated->images[0];
  }
  EXPECT_TRUE(torch::equal(images[0], images[1]));
}

// The warm-up job of a model served from precomputed embeddings: zero embeddings of its shapes.
TEST(WarmupJob, FollowsTheCardsDefaultsAndShapes) {
  pipeline::ModelCard card;
  card.images_out = false;
  card.requires_prompt_embeddings = true;
  card.prompt_embeds_shape = {1, -1, 32};
  card.default_height = card.default_width = 1024;
  card.default_guidance_scale = 4.0f;
  card.default_max_sequence_length = 77;
  const pipeline::GenerationJob job = pipeline::WarmupJob(card, 0, 512);
  EXPECT_EQ(job.height, 1024);
  EXPECT_EQ(job.width, 512);
  EXPECT_EQ(job.num_inference_steps, 2);
  EXPECT_EQ(job.max_sequence_length, 77);
  EXPECT_EQ(job.output, pipeline::JobOutput::kLatents);
  ASSERT_EQ(job.items.size(), 1u);
  ASSERT_TRUE(job.items[0].embeddings.has_value());
  EXPECT_EQ(job.items[0].embeddings->prompt_embeds.sizes(), (std::vector<int64_t>{1, 77, 32}));
  EXPECT_FALSE(job.items[0].embeddings->pooled_prompt_embeds.defined());
  EXPECT_EQ(job.items[0].guidance_scale, 4.0f);
  card.accepts_text_prompt = true;
  card.requires_prompt_embeddings = false;
  EXPECT_FALSE(pipeline::WarmupJob(card, 0, 0).items[0].prompt.empty());
}

TEST(Engine, OutOfMemoryFailsTheJobAndTheWorkerKeepsServing) {
  BindingProbe probe;
  std::atomic<int> calls{0};
  Engine engine(WorkerOptions{}, ScriptedDeps(&probe, [&]() -> absl::StatusOr<pipeline::GenerationResult> {
                  if (calls.fetch_add(1) == 0) {
                    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 80.00 GiB");
                  }
                  return pipeline::GenerationResult{};
                }));
  ASSERT_TRUE(Init(engine, "unused").ok());
  auto failed = RunAndWait(engine, AnyJob());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted) << failed.status();
  EXPECT_NE(failed.status().message().find("out of device memory"), std::string::npos);
  EXPECT_TRUE(engine.Status().ready);
  EXPECT_TRUE(RunAndWait(engine, AnyJob()).ok());
}

// WorkerStatus.cached_steps: the running total of the jobs' cached transformer passes (a failed
// job reports none).
TEST(Engine, StatusTotalsTheCachedPassesOfItsJobs) {
  BindingProbe probe;
  std::atomic<int> calls{0};
  Engine engine(WorkerOptions{},
                ScriptedDeps(&probe, [&]() -> absl::StatusOr<pipeline::GenerationResult> {
                  if (calls.fetch_add(1) == 2) return absl::ResourceExhaustedError("no memory");
                  pipeline::GenerationResult r;
                  r.full_steps = 2;
                  r.cached_steps = 3;
                  return r;
                }));
  ASSERT_TRUE(Init(engine, "unused").ok());
  EXPECT_EQ(engine.Status().cached_steps, 0u);
  ASSERT_TRUE(RunAndWait(engine, AnyJob("a")).ok());
  EXPECT_EQ(engine.Status().cached_steps, 3u);
  ASSERT_TRUE(RunAndWait(engine, AnyJob("b")).ok());
  EXPECT_FALSE(RunAndWait(engine, AnyJob("c")).ok());
  EXPECT_EQ(engine.Status().cached_steps, 6u);
  EXPECT_EQ(WorkerStatusToProto(engine.Status()).cached_steps(), 6u);
}

TEST(Engine, OtherTorchErrorsAreInternalAndNeedAReformedGroup) {
  BindingProbe probe;
  Engine engine(WorkerOptions{}, ScriptedDeps(&probe, []() -> absl::StatusOr<pipeline::GenerationResult> {
                  TORCH_CHECK(false, "shape mismatch in a kernel");
                  return pipeline::GenerationResult{};
                }));
  ASSERT_TRUE(Init(engine, "unused").ok());
  auto failed = RunAndWait(engine, AnyJob());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(failed.status().message().find("shape mismatch in a kernel"), std::string::npos);
  EXPECT_FALSE(engine.Status().ready);
  EXPECT_EQ(RunAndWait(engine, AnyJob()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Engine, StatusAndCancelAnswerWhileAJobRuns) {
  BindingProbe probe;
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, release = false;
  Engine engine(WorkerOptions{}, ScriptedDeps(&probe, [&]() -> absl::StatusOr<pipeline::GenerationResult> {
                  std::unique_lock<std::mutex> lock(mu);
                  started = true;
                  cv.notify_all();
                  cv.wait(lock, [&] { return release; });
                  return pipeline::GenerationResult{};
                }));
  ASSERT_TRUE(Init(engine, "unused").ok());
  std::thread job([&] { EXPECT_TRUE(RunAndWait(engine, AnyJob()).ok()); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started; });
  }
  // The engine thread is busy; these answer from this thread.
  EXPECT_TRUE(engine.Status().ready);
  engine.Cancel("job");
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  job.join();
}

TEST(Engine, InitRefusesARankOutsideTheWorld) {
  BindingProbe probe;
  Engine engine(WorkerOptions{}, ScriptedDeps(&probe, [] { return pipeline::GenerationResult{}; }));
  v1::InitRequest r = InitFor("unused");
  r.set_rank(2);
  absl::Status s = InitWith(engine, r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(probe.binding, nullptr);
}

// Scripted deps whose pipeline loader keeps the options Init gave it in *seen.
EngineDeps RecordingPipelineOptions(BindingProbe* probe, pipeline::PipelineOptions* seen) {
  EngineDeps deps = ScriptedDeps(probe, [] { return pipeline::GenerationResult{}; });
  auto load = deps.load_pipeline;
  deps.load_pipeline = [seen, load](const pipeline::PipelineOptions& o, comm::Communicator* c) {
    *seen = o;
    return load(o, c);
  };
  return deps;
}

// --weights fp8 reaches Init as InitRequest.weights: refused on this CPU before any pipeline loads
// (FAILED_PRECONDITION naming the flag), an unknown value is INVALID_ARGUMENT, and the pipeline
// gets the format it was asked for.
TEST(Engine, InitChecksTheWeightFormat) {
  BindingProbe probe;
  pipeline::PipelineOptions seen;
  const EngineDeps deps = RecordingPipelineOptions(&probe, &seen);
  {
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest r = InitFor("unused");
    r.set_weights("fp8");
    const absl::Status s = InitWith(engine, r).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("--weights fp8"), absl::string_view::npos) << s;
  }
  {
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest r = InitFor("unused");
    r.set_weights("int4");
    EXPECT_EQ(InitWith(engine, r).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest r = InitFor("unused");
    r.set_weights("dtype");
    ASSERT_TRUE(InitWith(engine, r).ok());
    EXPECT_EQ(seen.weights, models::WeightFormat::kModelDtype);
  }
}

// InitRequest.cuda_graphs: unset gives the pipeline the default, a value reaches it, more than 64
// is INVALID_ARGUMENT naming the field; and Status reports the transformer's graph counters.
TEST(Engine, InitPassesCudaGraphsAndStatusReportsTheirUse) {
  BindingProbe probe;
  pipeline::PipelineOptions seen;
  const EngineDeps deps = RecordingPipelineOptions(&probe, &seen);
  {
    Engine engine(WorkerOptions{}, deps);
    ASSERT_TRUE(InitWith(engine, InitFor("unused")).ok());
    EXPECT_EQ(seen.cuda_graphs, models::kDefaultCudaGraphs);
    const v1::WorkerStatus st = WorkerStatusToProto(engine.Status());
    EXPECT_EQ(st.cuda_graph_replays(), 0u);  // the scripted pipeline has no graphs
    EXPECT_EQ(st.cuda_graph_captures(), 0u);
  }
  {
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest r = InitFor("unused");
    r.set_cuda_graphs(0);
    ASSERT_TRUE(InitWith(engine, r).ok());
    EXPECT_EQ(seen.cuda_graphs, 0);
  }
  {
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest r = InitFor("unused");
    r.set_cuda_graphs(65);
    const absl::Status s = InitWith(engine, r).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("cuda_graphs must be in 0..64"), absl::string_view::npos) << s;
  }
}


// A pipeline whose every step takes `step` of wall time (a sleep, so the figures do not depend on
// the machine's load) and reports its own duration, as the real ones do.
class SteppingPipeline final : public pipeline::Pipeline {
 public:
  SteppingPipeline(uint32_t steps, std::chrono::milliseconds step) : steps_(steps), step_(step) {
    card_.name = "stepping";
    card_.family = "flux1";
  }
  const pipeline::ModelCard& Card() const override { return card_; }
  absl::StatusOr<pipeline::GenerationResult> Run(const pipeline::GenerationJob&,
                                                 const pipeline::StepCallback& on_step,
                                                 const pipeline::CancelPredicate&) override {
    for (uint32_t i = 1; i <= steps_; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(step_);
      on_step({i, steps_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    }
    return pipeline::GenerationResult{};
  }
  uint64_t weight_bytes() const override { return 1; }
  models::StepGraphStats transformer_graph_stats() const override { return {}; }

 private:
  const uint32_t steps_;
  const std::chrono::milliseconds step_;
  pipeline::ModelCard card_;
};

EngineDeps SteppingDeps(BindingProbe* probe, uint32_t steps, std::chrono::milliseconds step) {
  EngineDeps deps;
  deps.bind_device = probe->Factory(0);
  deps.load_pipeline = [steps, step](const pipeline::PipelineOptions&, comm::Communicator*)
      -> absl::StatusOr<std::unique_ptr<pipeline::Pipeline>> {
    return std::unique_ptr<pipeline::Pipeline>(new SteppingPipeline(steps, step));
  };
  return deps;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A client that never reads: the handler's first write blocks (as a gRPC write does once the
// stream's window is full) and stays blocked. The job still runs at full speed on the engine
// thread, which never waits for the handler: the job's wall time and its step times match those
// with a reader that keeps up, the job ends while the write is still blocked, and once the reader
// moves again it gets the latest events (intermediate ones dropped beyond the queue's capacity)
// and then the terminal one, the job's result.
TEST(Engine, AStalledProgressReaderNeitherBlocksNorSlowsTheJob) {
  constexpr uint32_t kSteps = 30;
  constexpr auto kStep = std::chrono::milliseconds(15);
  constexpr size_t kCapacity = 4;
  BindingProbe probe;
  Engine engine(WorkerOptions{}, SteppingDeps(&probe, kSteps, kStep));
  ASSERT_TRUE(Init(engine, "unused").ok());

  // A reader that keeps up.
  ProgressQueue<pipeline::StepEvent> fast_queue(64);
  const auto fast_start = std::chrono::steady_clock::now();
  auto fast_done = engine.Run(AnyJob("fast"), &fast_queue, {});
  std::vector<uint32_t> fast_steps;
  fast_queue.Drain([&](const pipeline::StepEvent& e) {
    fast_steps.push_back(e.step);
    return true;
  });
  ASSERT_TRUE(fast_done.get().ok());
  const double fast_wall = Seconds(fast_start);
  const EngineStatus after_fast = engine.Status();
  EXPECT_EQ(fast_steps.size(), kSteps);

  // A reader whose first write never returns until released.
  ProgressQueue<pipeline::StepEvent> stalled_queue(kCapacity);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<uint32_t> written;
  std::thread handler([&] {  // waiting in Pop before the job starts
    stalled_queue.Drain([&](const pipeline::StepEvent& e) {
      written.push_back(e.step);
      released.wait();
      return true;
    });
  });
  const auto stalled_start = std::chrono::steady_clock::now();
  auto stalled_done = engine.Run(AnyJob("stalled"), &stalled_queue, {});
  // The engine thread finishes the job while the handler is stuck in its first write.
  ASSERT_EQ(stalled_done.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the engine thread waited for the progress reader";
  const double stalled_wall = Seconds(stalled_start);
  const EngineStatus after_stalled = engine.Status();
  release.set_value();
  handler.join();
  const absl::StatusOr<pipeline::GenerationResult> terminal = stalled_done.get();
  ASSERT_TRUE(terminal.ok()) << terminal.status();  // the terminal event: never dropped

  // Same job time, same step times (within scheduling noise).
  EXPECT_LT(stalled_wall, fast_wall * 1.5 + 0.1) << "fast " << fast_wall << " s";
  const double fast_step_sum = after_fast.step_seconds_sum;
  const double stalled_step_sum = after_stalled.step_seconds_sum - after_fast.step_seconds_sum;
  EXPECT_EQ(after_stalled.steps - after_fast.steps, kSteps);
  EXPECT_LT(stalled_step_sum, fast_step_sum * 1.5 + 0.05) << "fast " << fast_step_sum << " s";
  // An early event (the blocked write's), then the latest kCapacity in order; the rest dropped.
  ASSERT_EQ(written.size(), 1 + kCapacity);
  EXPECT_LT(written.front(), kSteps - kCapacity);
  for (size_t i = 1; i < written.size(); ++i) {
    EXPECT_EQ(written[i], kSteps - kCapacity + i) << "event " << i;
  }
  EXPECT_EQ(stalled_queue.dropped(), kSteps - written.size());
}

// Only rank 0 streams step progress (the frontend reads rank 0's); another rank runs the same job,
// counts its steps for Status, and reports only its result. (The group is a single-rank
// communicator standing in for rank 1 of 2.)
TEST(Engine, OnlyRankZeroStreamsStepProgress) {
  for (uint32_t rank : {0u, 1u}) {
    BindingProbe probe;
    EngineDeps deps = SteppingDeps(&probe, 3, std::chrono::milliseconds(1));
    deps.create_communicator = [](const GroupRendezvous&, const CommOptions&)
        -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
      return comm::MakeSingleRankCommunicator();
    };
    Engine engine(WorkerOptions{}, deps);
    v1::InitRequest r = InitFor("unused");
    r.set_rank(rank);
    r.mutable_rendezvous()->set_world_size(2);
    ASSERT_TRUE(InitWith(engine, r).ok());
    std::vector<pipeline::StepEvent> events;
    ASSERT_TRUE(RunAndWait(engine, AnyJob(), &events).ok());
    EXPECT_EQ(events.size(), rank == 0 ? 3u : 0u) << "rank " << rank;
    EXPECT_EQ(engine.Status().steps, 3u);
  }
}

// Init's progress reaches the handler through its queue in order (group, load, ..., ready last with
// the model), and the codec refuses bad strings naming the request field before the engine runs.
TEST(Engine, InitReportsItsPhasesAndTheCodecNamesBadFields) {
  BindingProbe probe;
  Engine engine(WorkerOptions{}, ScriptedDeps(&probe, [] { return pipeline::GenerationResult{}; }));
  std::vector<std::string> phases;
  auto report = InitWith(engine, InitFor("unused"), &phases);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_FALSE(phases.empty());
  EXPECT_EQ(phases.front(), "group");
  EXPECT_EQ(phases.back(), "ready");
  EXPECT_EQ(ReadyEvent(*report).model().name(), "scripted");
  EXPECT_EQ(ReadyEvent(*report).model().tp_degree(), 1u);
  const std::pair<void (v1::InitRequest::*)(const std::string&), std::string> fields[] = {
      {&v1::InitRequest::set_dtype, "dtype must be float32 or bfloat16, got 'x'"},
      {&v1::InitRequest::set_device, "device must be cpu or cuda, got 'x'"},
      {&v1::InitRequest::set_text_encoder_placement,
       "text_encoder_placement must be auto, sharded or rank0, got 'x'"},
      {&v1::InitRequest::set_lora_mode, "lora_mode must be merge or runtime, got 'x'"},
      {&v1::InitRequest::set_weights, "--weights must be 'dtype' or 'fp8', got 'x'"}};
  for (const auto& [set, message] : fields) {
    v1::InitRequest r = InitFor("unused");
    (r.*set)("x");
    const absl::StatusOr<InitConfig> config = InitConfigFromRequest(r);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(config.status().message(), message);
  }
  v1::InitRequest defaults;  // empty strings: the defaults
  const absl::StatusOr<InitConfig> config = InitConfigFromRequest(defaults);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->dtype, ModelDtype::kFloat32);
  EXPECT_EQ(config->device, DeviceKind::kCpu);
  EXPECT_EQ(config->text_encoder_placement, TextEncoderPlacement::kAuto);
  EXPECT_EQ(config->lora_mode, LoraMode::kMerge);
  EXPECT_EQ(config->weights, WeightFormat::kModelDtype);
  EXPECT_FALSE(config->cuda_graphs.has_value());
}

}  // namespace
}  // namespace ditserve::worker
