// Previews of the image in progress (GenerationJob::preview_images, issue 35's partial images):
// where they are taken (PreviewSteps), what they are (flow matching's clean-latent prediction
// x - sigma * v, which after the last step is the final latents themselves), and a pipeline's:
// rank 0 alone hands them over, at the steps picked, one image per item, the same at tp 1 and 2,
// and the job's result does not change.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm/local_communicator.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixtures.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::FixturesDir;
using ditserve::testing::RelativeError;

TEST(PreviewSteps, EvenlySpacedWithoutZeroOrRepeats) {
  EXPECT_EQ(PreviewSteps(28, 3), (std::vector<int>{7, 14, 21}));
  EXPECT_EQ(PreviewSteps(4, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(PreviewSteps(2, 3), (std::vector<int>{1}));
  EXPECT_EQ(PreviewSteps(1, 3), (std::vector<int>{}));
  EXPECT_EQ(PreviewSteps(10, 0), (std::vector<int>{}));
}

// RunDenoiseLoop in a group of one, every step's event kept.
absl::StatusOr<torch::Tensor> RunAlone(const FlowMatchEulerScheduler& scheduler,
                                       const torch::Tensor& start, const VelocityFn& velocity,
                                       const LoopPreviews& previews,
                                       std::vector<StepEvent>* events) {
  absl::StatusOr<torch::Tensor> out = absl::UnknownError("not run");
  const absl::Status group = comm::RunLocalGroup(1, [&](comm::Communicator& c) -> absl::Status {
    out = RunDenoiseLoop(
        scheduler, start, velocity, c, [&](const StepEvent& e) { events->push_back(e); }, nullptr,
        0, &previews);
    return out.status();
  });
  if (!group.ok()) return group;
  return out;
}

TEST(LoopPreviews, ThePredictionAfterTheLastStepIsTheResult) {
  FlowMatchSchedulerConfig config;
  FlowMatchEulerScheduler scheduler(config);
  ASSERT_TRUE(scheduler.SetTimesteps(FluxSigmas(5), std::nullopt).ok());
  torch::manual_seed(3);
  const torch::Tensor start = torch::randn({1, 6, 8});
  const torch::Tensor target = torch::randn({1, 6, 8});
  // A velocity field pointing from the sample to a fixed target, so every step moves.
  auto velocity = [&](const torch::Tensor& x, int) -> absl::StatusOr<torch::Tensor> {
    return x - target;
  };
  std::vector<torch::Tensor> seen;
  LoopPreviews previews;
  previews.after_steps = {2, 5};
  previews.decode = [&](const torch::Tensor& x0) -> absl::StatusOr<std::vector<torch::Tensor>> {
    seen.push_back(x0.clone());
    return std::vector<torch::Tensor>{x0.clone()};
  };
  std::vector<StepEvent> events;
  const absl::StatusOr<torch::Tensor> out = RunAlone(scheduler, start, velocity, previews, &events);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_LT(RelativeError(seen[1], *out), 1e-6);
  ASSERT_EQ(events.size(), 5u);
  for (const StepEvent& e : events) {
    const bool preview = e.step == 2 || e.step == 5;
    EXPECT_EQ(e.previews.size(), preview ? 1u : 0u) << e.step;
    EXPECT_EQ(e.preview_index, e.step == 2 ? 0 : e.step == 5 ? 1 : -1) << e.step;
  }
}

// The loop queues a step before it waits for the one before (RunDenoiseLoop's header): each step
// is still reported once, in order, with its own time, and a preview's decode is in no step's time.
TEST(LoopPreviews, EachStepReportsItsOwnTimeAndNotThePreviewsDecode) {
  FlowMatchSchedulerConfig config;
  FlowMatchEulerScheduler scheduler(config);
  ASSERT_TRUE(scheduler.SetTimesteps(FluxSigmas(4), std::nullopt).ok());
  const torch::Tensor start = torch::ones({1, 4, 8});
  constexpr double kStepSleep[] = {0.01, 0.06, 0.01, 0.03};
  auto velocity = [&](const torch::Tensor& x, int index) -> absl::StatusOr<torch::Tensor> {
    std::this_thread::sleep_for(std::chrono::duration<double>(kStepSleep[index]));
    return x * 0.5;
  };
  LoopPreviews previews;
  previews.after_steps = {2};
  previews.decode = [&](const torch::Tensor& x0) -> absl::StatusOr<std::vector<torch::Tensor>> {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    return std::vector<torch::Tensor>{x0.clone()};
  };
  std::vector<StepEvent> events;
  const auto begin = std::chrono::steady_clock::now();
  const absl::StatusOr<torch::Tensor> out = RunAlone(scheduler, start, velocity, previews, &events);
  const double loop =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(events.size(), 4u);
  double sum = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].step, i + 1);
    EXPECT_EQ(events[i].total, 4u);
    EXPECT_GE(events[i].seconds, kStepSleep[i]) << "step " << i + 1;
    EXPECT_LT(events[i].seconds, kStepSleep[i] + 0.1) << "step " << i + 1 << " took in the decode";
    sum += events[i].seconds;
  }
  EXPECT_EQ(events[1].previews.size(), 1u);
  EXPECT_LE(sum, loop);
  EXPECT_GE(loop - sum, 0.15);  // the decode: in the loop, in no step
}

struct Outcome {
  torch::Tensor image;
  std::vector<std::vector<torch::Tensor>> previews;  // per step of rank 0
  int other_ranks_previews = 0;
};

absl::StatusOr<Outcome> RunFlux1(int world, int previews) {
  GenerationJob job;
  job.height = job.width = 32;
  job.num_inference_steps = 4;
  job.max_sequence_length = 32;
  job.preview_images = previews;
  JobItem item;
  item.prompt = item.prompt_2 = "a cat holding a sign that says hello";
  item.seed = 42;
  item.guidance_scale = 3.5f;
  job.items.push_back(item);
  std::mutex mu;
  Outcome out;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/flux1-tiny";
    auto p = LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    std::vector<std::vector<torch::Tensor>> mine;
    auto r = (*p)->Run(
        job, [&](const StepEvent& e) { mine.push_back(e.previews); }, [] { return false; });
    if (!r.ok()) return r.status();
    std::lock_guard<std::mutex> lock(mu);
    if (c.rank() == 0) {
      out.image = r->images.at(0);
      out.previews = mine;
    } else {
      for (const auto& p : mine) out.other_ranks_previews += static_cast<int>(p.size());
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

TEST(PipelinePreviews, RankZeroHandsThemOverAndTheResultIsUnchanged) {
  auto plain = RunFlux1(1, 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto one = RunFlux1(1, 2);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = RunFlux1(2, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_TRUE(torch::equal(one->image, plain->image));
  EXPECT_LT(RelativeError(two->image, one->image), 1e-5);
  EXPECT_EQ(two->other_ranks_previews, 0);
  for (const Outcome* r : {&*one, &*two}) {
    ASSERT_EQ(r->previews.size(), 4u);
    const std::vector<size_t> counts = {r->previews[0].size(), r->previews[1].size(),
                                        r->previews[2].size(), r->previews[3].size()};
    EXPECT_EQ(counts, (std::vector<size_t>{1, 1, 0, 0}));  // PreviewSteps(4, 2) = {1, 2}
    for (int step : {0, 1}) {
      const torch::Tensor& p = r->previews[step][0];
      EXPECT_EQ(p.sizes(), one->image.sizes());
      EXPECT_GE(p.min().item<float>(), 0.0f);
      EXPECT_LE(p.max().item<float>(), 1.0f);
    }
  }
  EXPECT_LT(RelativeError(two->previews[1][0], one->previews[1][0]), 1e-5);
  // The later preview is closer to the final image than the earlier one.
  EXPECT_LT(RelativeError(one->previews[1][0], one->image),
            RelativeError(one->previews[0][0], one->image));
}

}  // namespace
}  // namespace ditserve::pipeline
