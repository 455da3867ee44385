// A pipeline job on in-process ranks, for the pipeline tests: every rank (a thread of
// comm::RunLocalGroup) loads the pipeline with the same options and runs the same job; the
// outcome keeps every rank's result (rank 0's holds the images or latents) and how many progress
// events each rank saw.
//
// Thread-safety: call from a test's thread; the ranks run on their own threads.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/job.h"
#include "pipeline/pipeline.h"

namespace ditserve::testing {

struct PipelineGroupRun {
  pipeline::ModelCard card;                    // rank 0's
  std::vector<pipeline::GenerationResult> results;  // by rank
  std::vector<int> steps;                      // progress events by rank

  const pipeline::GenerationResult& rank0() const { return results.at(0); }
};

// The first failing rank's status (comm::RunLocalGroup's), or every rank's outcome.
absl::StatusOr<PipelineGroupRun> RunPipelineGroup(int world,
                                                  const pipeline::PipelineOptions& options,
                                                  const pipeline::GenerationJob& job);

}  // namespace ditserve::testing
