#include "tests/support/pipeline_group.h"

#include <memory>
#include <mutex>
#include <utility>

#include "comm/local_communicator.h"
#include "common/status_macros.h"

namespace ditserve::testing {

absl::StatusOr<PipelineGroupRun> RunPipelineGroup(int world,
                                                  const pipeline::PipelineOptions& options,
                                                  const pipeline::GenerationJob& job) {
  std::mutex mu;
  PipelineGroupRun out;
  out.results.resize(world);
  out.steps.assign(world, 0);
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> p, pipeline::LoadPipeline(options, &c));
    int steps = 0;
    absl::StatusOr<pipeline::GenerationResult> r =
        p->Run(job, [&](const pipeline::StepEvent&) { ++steps; }, [] { return false; });
    std::lock_guard<std::mutex> lock(mu);
    out.steps[c.rank()] = steps;
    if (!r.ok()) return r.status();
    out.results[c.rank()] = *std::move(r);
    if (c.rank() == 0) out.card = p->Card();
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace ditserve::testing
