#include "tests/support/fixture_requests.h"

#include <fstream>

#include "tests/support/fixtures.h"

namespace ditserve::testing {

nlohmann::json Flux1CallArgs() {
  std::ifstream in(FixturesDir() + "/flux1_call.json");
  return nlohmann::json::parse(in);
}

v1::GenerateRequest Flux1FixtureGenerateRequest() {
  const nlohmann::json c = Flux1CallArgs();
  v1::GenerateRequest r;
  r.set_prompt(c["prompt"].get<std::string>());
  r.set_height(c["height"].get<uint32_t>());
  r.set_width(c["width"].get<uint32_t>());
  r.set_num_inference_steps(c["steps"].get<uint32_t>());
  r.set_guidance_scale(c["guidance_scale"].get<float>());
  r.set_seed(c["seed"].get<uint64_t>());
  r.set_max_sequence_length(c["max_sequence_length"].get<uint32_t>());
  return r;
}

worker::v1::RunRequest Flux1FixtureRunRequest(v1::OutputFormat format) {
  const nlohmann::json c = Flux1CallArgs();
  worker::v1::RunRequest r;
  r.set_job_id("fixture");
  r.set_height(c["height"].get<uint32_t>());
  r.set_width(c["width"].get<uint32_t>());
  r.set_num_inference_steps(c["steps"].get<uint32_t>());
  r.set_max_sequence_length(c["max_sequence_length"].get<uint32_t>());
  r.set_output_format(format);
  auto* item = r.add_items();
  item->set_request_id("fixture");
  item->set_prompt(c["prompt"].get<std::string>());
  item->set_prompt_2(c["prompt"].get<std::string>());
  item->set_seed(c["seed"].get<uint64_t>());
  item->set_guidance_scale(c["guidance_scale"].get<float>());
  item->set_true_cfg_scale(1.0f);
  return r;
}

}  // namespace ditserve::testing
