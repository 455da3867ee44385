// The one place where the worker's wire messages meet the pipeline's typed job: RunRequest →
// GenerationJob (tensors decoded, field names in errors), GenerationResult → RunResult (every
// GenerateResponse field: request ids, format, size, seed, steps, the encoded image or latents),
// ModelCard → ModelDescription.
//
// Stateless functions; safe from any thread.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "pipeline/job.h"

namespace ditserve::worker {

absl::StatusOr<pipeline::GenerationJob> JobFromRunRequest(const v1::RunRequest& request);

// `result` is rank 0's (one image or latents tensor per item); other ranks pass theirs and get a
// RunResult with the timings only.
absl::StatusOr<v1::RunResult> RunResultFromGeneration(const v1::RunRequest& request,
                                                      const pipeline::GenerationResult& result,
                                                      const pipeline::ModelCard& card);

v1::ModelDescription DescribeModel(const pipeline::ModelCard& card, uint32_t tp_degree,
                                   uint64_t weight_bytes);

}  // namespace ditserve::worker
