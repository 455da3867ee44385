// Validation of public GenerateRequests against the served model and the configured limits.
// Produces a fully defaulted RunItem plus the shape that decides which requests may share a batch.
// Every error is INVALID_ARGUMENT with a message that names the field and the limit. Pure function
// of its inputs (the random seed aside); thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "server/frontend_options.h"

namespace ditserve::server {

// Requests with equal shapes can run in one batch.
struct RequestShape {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t steps = 0;
  uint32_t max_sequence_length = 0;
  int output_format = 0;
  bool uses_embeddings = false;
  uint32_t embeddings_length = 0;  // text tokens of precomputed embeddings
  bool true_cfg = false;
  bool operator==(const RequestShape& o) const {
    return height == o.height && width == o.width && steps == o.steps &&
           max_sequence_length == o.max_sequence_length && output_format == o.output_format &&
           uses_embeddings == o.uses_embeddings && embeddings_length == o.embeddings_length &&
           true_cfg == o.true_cfg;
  }
};

struct ValidatedRequest {
  worker::v1::RunItem item;
  RequestShape shape;
};

absl::StatusOr<ValidatedRequest> ValidateRequest(const v1::GenerateRequest& request,
                                                 const worker::v1::ModelDescription& model,
                                                 const RequestLimits& limits);

// The public ModelInfo for a model description and the limits.
v1::ModelInfo MakeModelInfo(const worker::v1::ModelDescription& model, const RequestLimits& limits,
                            uint64_t max_queue, uint64_t max_batch);

}  // namespace ditserve::server
