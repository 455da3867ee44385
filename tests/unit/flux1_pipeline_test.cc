// The whole FLUX.1 pipeline (prompt -> image) on the flux1-tiny fixture at tp = 1, 2 and 4, each
// rank in its own thread of an in-process group: the image must equal diffusers' flux1.image.
#include <gtest/gtest.h>
#include <png.h>

#include <mutex>

#include "pipeline/flux1_pipeline.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "worker/comm/local_communicator.h"

namespace ditserve::pipeline {
namespace {

using ditserve::testing::FixturesDir;
using ditserve::testing::Ref;
using ditserve::testing::Flux1FixtureRunRequest;
using ditserve::testing::RelativeError;

// Runs `request` on a group of `world` in-process ranks; returns rank 0's result and the number of
// step events rank 0 saw.
absl::StatusOr<worker::v1::RunResult> RunGroup(int world, const worker::v1::RunRequest& request,
                                               int* steps_seen = nullptr,
                                               std::function<bool(int rank)> cancel = {}) {
  std::mutex mu;
  worker::v1::RunResult rank0;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/flux1-tiny";
    auto p = LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    int steps = 0;
    auto r = (*p)->Run(
        request, [&](const StepEvent&) { ++steps; },
        [&] { return cancel ? cancel(c.rank()) : false; });
    if (!r.ok()) return r.status();
    if (c.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      rank0 = *r;
      if (steps_seen) *steps_seen = steps;
    } else if (r->items_size() != 0) {
      return absl::InternalError("only rank 0 may return images");
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return rank0;
}

torch::Tensor RawImage(const ditserve::v1::GenerateResponse& resp) {
  torch::Tensor t = torch::empty({resp.height(), resp.width(), 3}, torch::kFloat32);
  EXPECT_EQ(resp.image().size(), static_cast<size_t>(t.numel()) * 4);
  std::memcpy(t.data_ptr(), resp.image().data(), std::min<size_t>(resp.image().size(), t.numel() * 4));
  return t;
}

torch::Tensor DecodePng(const std::string& bytes) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  EXPECT_TRUE(png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()));
  image.format = PNG_FORMAT_RGB;
  torch::Tensor out = torch::empty({image.height, image.width, 3}, torch::kUInt8);
  EXPECT_TRUE(png_image_finish_read(&image, nullptr, out.data_ptr(), 0, nullptr));
  return out;
}

class Flux1PipelineTest : public ::testing::TestWithParam<int> {};

TEST_P(Flux1PipelineTest, RawImageMatchesDiffusers) {
  int steps = 0;
  auto result = RunGroup(GetParam(), Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_RAW_F32), &steps);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->items_size(), 1);
  EXPECT_EQ(steps, 4);
  const double err = RelativeError(RawImage(result->items(0)), Ref("flux1.image"));
  EXPECT_LT(err, 1e-3) << "tp=" << GetParam();
  RecordProperty("relative_error", std::to_string(err));
}

TEST_P(Flux1PipelineTest, PngWithinOneLevelOfReference) {
  auto result = RunGroup(GetParam(), Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_PNG));
  ASSERT_TRUE(result.ok()) << result.status();
  torch::Tensor png = DecodePng(result->items(0).image()).to(torch::kInt32);
  torch::Tensor ref = (Ref("flux1.image") * 255).round().to(torch::kInt32);
  ASSERT_EQ(png.sizes(), ref.sizes());
  EXPECT_LE((png - ref).abs().max().item<int>(), 1);
}

INSTANTIATE_TEST_SUITE_P(TpDegrees, Flux1PipelineTest, ::testing::Values(1, 2, 4));

TEST(Flux1Pipeline, LatentsMatchTheLastDenoisingStep) {
  auto result = RunGroup(2, Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_LATENTS));
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& t = result->items(0).latents();
  torch::Tensor latents = torch::from_blob(const_cast<char*>(t.data().data()),
                                           {t.shape(0), t.shape(1), t.shape(2)}, torch::kFloat32);
  EXPECT_LT(RelativeError(latents, Ref("flux1.latents_after_step.3")), 1e-4);
}

TEST(Flux1Pipeline, CancellationStopsEveryRankAtTheSameStep) {
  // Only rank 1 sees the cancel request, after its second step boundary: all ranks must stop.
  std::atomic<int> checks{0};
  auto result = RunGroup(2, Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_PNG), nullptr,
                         [&](int rank) { return rank == 1 && checks.fetch_add(1) >= 2; });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
}

TEST(Flux1Pipeline, PrecomputedEmbeddingsGiveTheSameImage) {
  auto request = Flux1FixtureRunRequest(ditserve::v1::OUTPUT_FORMAT_RAW_F32);
  auto* e = request.mutable_items(0)->mutable_prompt_embeddings();
  auto put = [](ditserve::v1::Tensor* out, const torch::Tensor& t) {
    torch::Tensor c = t.contiguous();
    for (int64_t d : c.sizes()) out->add_shape(d);
    out->set_dtype(ditserve::v1::DTYPE_FLOAT32);
    out->set_data(c.data_ptr(), c.numel() * 4);
  };
  put(e->mutable_prompt_embeds(), Ref("flux1.prompt_embeds"));
  put(e->mutable_pooled_prompt_embeds(), Ref("flux1.pooled_prompt_embeds"));
  request.mutable_items(0)->set_prompt("");
  auto result = RunGroup(2, request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(RelativeError(RawImage(result->items(0)), Ref("flux1.image")), 1e-3);
}

}  // namespace
}  // namespace ditserve::pipeline
