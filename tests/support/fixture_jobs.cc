#include "tests/support/fixture_jobs.h"

#include <gtest/gtest.h>

#include "tests/support/fixture_requests.h"
#include "worker/job_codec.h"

namespace ditserve::testing {

pipeline::GenerationJob Flux1FixtureJob(pipeline::JobOutput output) {
  auto job = worker::JobFromRunRequest(Flux1FixtureRunRequest(
      output == pipeline::JobOutput::kLatents ? v1::OUTPUT_FORMAT_LATENTS : v1::OUTPUT_FORMAT_RAW_F32));
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *std::move(job) : pipeline::GenerationJob{};
}

}  // namespace ditserve::testing
