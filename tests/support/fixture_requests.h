// Test support: the fixture pipeline call (fixtures/flux1_call.json, the arguments diffusers'
// flux1.* reference tensors were made with) as the requests the server and the workers take.
#pragma once

#include <nlohmann/json.hpp>

#include "ditserve/v1/ditserve.pb.h"
#include "ditserve/worker/v1/worker.pb.h"

namespace ditserve::testing {

// fixtures/flux1_call.json, parsed.
nlohmann::json Flux1CallArgs();

// The call as a public Generate request (output format left unset: the server's default).
v1::GenerateRequest Flux1FixtureGenerateRequest();

// The call as one worker Run job of one item (prompt_2 = prompt, true_cfg_scale 1), in `format`.
worker::v1::RunRequest Flux1FixtureRunRequest(v1::OutputFormat format);

}  // namespace ditserve::testing
