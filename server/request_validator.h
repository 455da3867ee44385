// Validation of public GenerateRequests against the served model and the configured limits.
// Produces a fully defaulted RunItem plus the shape that decides which requests may share a batch.
// Every error is INVALID_ARGUMENT with a message that names the field and the limit. Pure function
// of its inputs (the random seed aside); thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
  // The LoRA adapters applied (name, scale), as in RunItem.loras: sorted by name, so the same set
  // given in another order is equal, and a job's items all have the same (the workers require it).
  std::vector<std::pair<std::string, float>> loras;
  bool operator==(const RequestShape& o) const {
    return height == o.height && width == o.width && steps == o.steps &&
           max_sequence_length == o.max_sequence_length && output_format == o.output_format &&
           uses_embeddings == o.uses_embeddings && embeddings_length == o.embeddings_length &&
           true_cfg == o.true_cfg && loras == o.loras;
  }
};

struct ValidatedRequest {
  worker::v1::RunItem item;
  RequestShape shape;
};

// LoRA choices (`loras`): at most limits.max_loras_per_request, each naming an adapter of
// model.loras() once, with a finite scale of at most limits.max_lora_scale in magnitude (absent:
// 1.0). They are copied to item.loras and shape.loras sorted by name, every scale set.
absl::StatusOr<ValidatedRequest> ValidateRequest(const v1::GenerateRequest& request,
                                                 const worker::v1::ModelDescription& model,
                                                 const RequestLimits& limits);

// The public ModelInfo for a model description (its loaded LoRA adapters included) and the limits.
v1::ModelInfo MakeModelInfo(const worker::v1::ModelDescription& model, const RequestLimits& limits,
                            uint64_t max_queue, uint64_t max_batch);

}  // namespace ditserve::server
