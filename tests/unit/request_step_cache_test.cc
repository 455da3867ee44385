// GenerateRequest.cache_threshold in the frontend: the validator's default and bounds (NaN,
// infinities, negatives, over the model's max_threshold, a model without the cache), the server
// default within the model's bound (ApplyServerDefaults), ModelInfo.step_cache, and the batching
// rule (a request with the cache on never shares a batch).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "server/admission_queue.h"
#include "server/image_generation_service.h"
#include "server/request_validator.h"

namespace ditserve::server {
namespace {

// A FLUX.1 description as the workers send it: the cache offered up to `max_threshold` (0: none).
worker::v1::ModelDescription Model(double max_threshold = 1.0) {
  worker::v1::ModelDescription m;
  m.set_name("flux1-tiny");
  m.set_family("flux1");
  m.mutable_inputs()->set_accepts_text_prompt(true);
  m.mutable_defaults()->set_height(64);
  m.mutable_defaults()->set_width(64);
  m.mutable_defaults()->set_num_inference_steps(4);
  m.mutable_defaults()->set_guidance_scale(3.5f);
  m.mutable_defaults()->set_max_sequence_length(32);
  if (max_threshold > 0) {
    m.mutable_step_cache()->set_method("first_block_cache");
    m.mutable_step_cache()->set_max_threshold(max_threshold);
  }
  return m;
}

// The description as the service validates against it: the server's defaults applied.
worker::v1::ModelDescription Served(double default_threshold, double max_threshold = 1.0) {
  FrontendOptions options;
  options.default_cache_threshold = default_threshold;
  worker::v1::ModelDescription m = Model(max_threshold);
  ApplyServerDefaults(options, &m);
  return m;
}

v1::GenerateRequest Request(std::optional<double> cache_threshold = std::nullopt) {
  v1::GenerateRequest r;
  r.set_prompt("a cat");
  if (cache_threshold) r.set_cache_threshold(*cache_threshold);
  return r;
}

TEST(RequestStepCache, AbsentTakesTheServersDefaultAndGivenWins) {
  auto off = ValidateRequest(Request(), Served(0), RequestLimits());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->shape.cache_threshold, 0.0) << "no flag: the cache is off";
  auto defaulted = ValidateRequest(Request(), Served(0.12), RequestLimits());
  ASSERT_TRUE(defaulted.ok()) << defaulted.status();
  EXPECT_EQ(defaulted->shape.cache_threshold, 0.12);
  // The request's own value wins, 0 (off) included.
  auto zero = ValidateRequest(Request(0.0), Served(0.12), RequestLimits());
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->shape.cache_threshold, 0.0);
  auto own = ValidateRequest(Request(0.05), Served(0.12), RequestLimits());
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->shape.cache_threshold, 0.05);
  auto negative_zero = ValidateRequest(Request(-0.0), Served(0.12), RequestLimits());
  ASSERT_TRUE(negative_zero.ok()) << negative_zero.status();
  EXPECT_FALSE(std::signbit(negative_zero->shape.cache_threshold)) << "-0 is sent as 0";
}

TEST(RequestStepCache, TheBoundsAreTheModelsAndEveryRefusalNamesTheFieldAndTheLimit) {
  auto at_max = ValidateRequest(Request(1.0), Served(0), RequestLimits());
  ASSERT_TRUE(at_max.ok()) << at_max.status();
  EXPECT_EQ(at_max->shape.cache_threshold, 1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double t : {-0.1, 1.5, nan, inf, -inf}) {
    auto v = ValidateRequest(Request(t), Served(0), RequestLimits());
    ASSERT_FALSE(v.ok()) << t;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(v.status().message(), "cache_threshold must be in 0..1 "))
        << v.status();
  }
  // A model that offers less: its bound.
  auto over = ValidateRequest(Request(0.3), Served(0, 0.25), RequestLimits());
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(),
            "cache_threshold must be in 0..0.25 (ModelInfo.step_cache.max_threshold; 0 = off), "
            "got 0.3");
  // A model without the cache: only 0.
  EXPECT_TRUE(ValidateRequest(Request(0.0), Served(0, 0), RequestLimits()).ok());
  auto none = ValidateRequest(Request(0.1), Served(0, 0), RequestLimits());
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::StartsWith(none.status().message(),
                               "cache_threshold must be 0 (off): model family 'flux1' offers no "
                               "step cache"))
      << none.status();
}

TEST(RequestStepCache, TheServerDefaultStaysWithinWhatTheModelOffers) {
  EXPECT_EQ(Served(0.5, 0.25).step_cache().default_threshold(), 0.25);
  EXPECT_EQ(Served(0.5, 0).step_cache().default_threshold(), 0.0);
  auto v = ValidateRequest(Request(), Served(0.5, 0), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape.cache_threshold, 0.0) << "no cache to default to";
}

TEST(RequestStepCache, ModelInfoPublishesTheMethodTheBoundAndTheDefault) {
  const v1::ModelInfo info = MakeModelInfo(Served(0.1), RequestLimits(), 16, 4);
  ASSERT_TRUE(info.has_step_cache());
  EXPECT_EQ(info.step_cache().method(), "first_block_cache");
  EXPECT_EQ(info.step_cache().max_threshold(), 1.0);
  EXPECT_EQ(info.step_cache().default_threshold(), 0.1);
  const v1::ModelInfo none = MakeModelInfo(Model(0), RequestLimits(), 16, 4);
  ASSERT_TRUE(none.has_step_cache()) << "always present";
  EXPECT_EQ(none.step_cache().max_threshold(), 0.0);
}

TEST(RequestStepCache, ARequestWithTheCacheOnIsNeverBatched) {
  AdmissionQueue queue(8);
  auto pending = [&](const v1::GenerateRequest& r, const worker::v1::ModelDescription& model,
                     const std::string& id) {
    auto v = ValidateRequest(r, model, RequestLimits());
    EXPECT_TRUE(v.ok()) << v.status();
    return std::make_shared<PendingRequest>(id, *std::move(v),
                                            Clock::now() + std::chrono::seconds(60));
  };
  // Same shape otherwise: two with the cache on (one by the server's default), then two off.
  ASSERT_TRUE(queue.Push(pending(Request(0.1), Served(0), "on1")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(), Served(0.1), "on2")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(), Served(0), "off1")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(0.0), Served(0.1), "off2")).ok());
  auto first = queue.PopBatch(8);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]->id(), "on1");
  auto second = queue.PopBatch(8);
  ASSERT_EQ(second.size(), 1u) << "an equal threshold does not batch either";
  EXPECT_EQ(second[0]->id(), "on2");
  auto third = queue.PopBatch(8);
  ASSERT_EQ(third.size(), 2u) << "requests with the cache off still batch";
  EXPECT_EQ(third[0]->id(), "off1");
  EXPECT_EQ(third[1]->id(), "off2");
  // Nor does a cache-off request join a cache-on one's batch, queued first or not.
  ASSERT_TRUE(queue.Push(pending(Request(), Served(0), "off3")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(0.2), Served(0), "on3")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(), Served(0), "off4")).ok());
  auto fourth = queue.PopBatch(8);
  ASSERT_EQ(fourth.size(), 2u);
  EXPECT_EQ(fourth[0]->id(), "off3");
  EXPECT_EQ(fourth[1]->id(), "off4");
  auto fifth = queue.PopBatch(8);
  ASSERT_EQ(fifth.size(), 1u);
  EXPECT_EQ(fifth[0]->id(), "on3");
}

}  // namespace
}  // namespace ditserve::server
