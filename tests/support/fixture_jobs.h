// Test support: the fixture pipeline call (fixtures/flux1_call.json) as the typed job a pipeline
// runs, decoded from Flux1FixtureRunRequest by the worker's own codec.
#pragma once

#include "pipeline/job.h"

namespace ditserve::testing {

pipeline::GenerationJob Flux1FixtureJob(pipeline::JobOutput output);

}  // namespace ditserve::testing
