// The worker engine on a real GPU (skipped where torch sees no CUDA device): Init binds the rank's
// CUDA device on the engine thread, and every denoising step of a real job (the FLUX.1 fixture
// pipeline) runs there with that device current, whichever thread submitted the job; the caller's
// thread is left alone.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "tests/support/fixture_jobs.h"
#include "tests/support/fixtures.h"
#include "tests/support/step_observer.h"
#include "worker/engine.h"
#include "worker/job_codec.h"

namespace ditserve::worker {
namespace {

using ::ditserve::testing::StepObserver;

TEST(CudaEngine, EveryStepRunsWithTheRanksDeviceCurrent) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  const int last = static_cast<int>(torch::cuda::device_count()) - 1;
  WorkerOptions options;
  options.device_index = last;  // the highest visible device: 0 on a one-GPU host
  auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  std::atomic<int> steps{0}, on_device{0};
  EngineDeps deps;
  deps.load_pipeline = [&](const pipeline::PipelineOptions& o, comm::Communicator* c)
      -> absl::StatusOr<std::unique_ptr<pipeline::Pipeline>> {
    auto inner = pipeline::LoadPipeline(o, c);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<pipeline::Pipeline>(new StepObserver(*std::move(inner), [&] {
      ++steps;
      on_device += guard->getDevice().index() == last ? 1 : 0;
    }));
  };
  Engine engine(options, deps);
  v1::InitRequest init;
  init.set_rank(0);
  init.mutable_rendezvous()->set_world_size(1);
  init.set_model_dir(::ditserve::testing::FixturesDir() + "/flux1-tiny");
  init.set_device("cuda");
  init.set_dtype("float32");
  auto config = InitConfigFromRequest(init);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(engine.Init(*std::move(config), nullptr).get().ok());
  std::thread caller([&] {
    RunJob job{"cuda", ::ditserve::testing::Flux1FixtureJob(pipeline::JobOutput::kImage)};
    auto r = engine.Run(std::move(job), nullptr, {}).get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(steps.load(), 4);
    EXPECT_EQ(on_device.load(), 4);
    EXPECT_LT(::ditserve::testing::RelativeError(r->images[0], ::ditserve::testing::Ref("flux1.image")), 1e-3);
  });
  caller.join();
  EXPECT_GT(engine.Status().memory.peak_allocated, 0u);
}

}  // namespace
}  // namespace ditserve::worker
