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
#include "server/input_images.h"

namespace ditserve::server {

// Requests with equal shapes can run in one batch.
struct RequestShape {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t steps = 0;
  uint32_t max_sequence_length = 0;
  int output_format = 0;
  uint32_t output_quality = 0;  // JPEG / WebP: GenerateRequest.output_compression (absent: 100)
  bool uses_embeddings = false;
  uint32_t embeddings_length = 0;  // text tokens of precomputed embeddings
  bool true_cfg = false;
  // The LoRA adapters applied (name, scale), as in RunItem.loras: sorted by name, so the same set
  // given in another order is equal, and a job's items all have the same (the workers require it).
  std::vector<std::pair<std::string, float>> loras;
  // GenerateRequest.images given. A request with input images runs alone: the admission queue
  // never batches it with another request (batchable()), so the pipelines get one item per job
  // whenever images are involved.
  uint32_t input_images = 0;
  // GenerateRequest.preview_images (GenerateStream; the service zeroes it for other calls).
  uint32_t preview_images = 0;
  // The step cache's threshold (GenerateRequest.cache_threshold, or the server's default when
  // absent; 0 = off). A request with the cache on runs alone (batchable()): First Block Cache
  // decides per call over the whole batch (diffusers compares the batch's first-block residuals as
  // one tensor), so another request's images would change this one's steps.
  double cache_threshold = 0;
  bool batchable() const { return input_images == 0 && cache_threshold == 0; }
  bool operator==(const RequestShape& o) const {
    return height == o.height && width == o.width && steps == o.steps &&
           max_sequence_length == o.max_sequence_length && output_format == o.output_format &&
           output_quality == o.output_quality && uses_embeddings == o.uses_embeddings &&
           embeddings_length == o.embeddings_length && true_cfg == o.true_cfg && loras == o.loras &&
           input_images == o.input_images && preview_images == o.preview_images &&
           cache_threshold == o.cache_threshold;
  }
};

struct ValidatedRequest {
  worker::v1::RunItem item;
  RequestShape shape;
};

// LoRA choices (`loras`): at most limits.max_loras_per_request, each naming an adapter of
// model.loras() once, with a finite scale of at most limits.max_lora_scale in magnitude (absent:
// 1.0). They are copied to item.loras and shape.loras sorted by name, every scale set.
// The step cache (`cache_threshold`): absent, model.step_cache().default_threshold (the server's
// --default-cache-threshold, ApplyServerDefaults); given, finite and in
// 0..model.step_cache().max_threshold (0 when the model offers no cache), into
// shape.cache_threshold (the job's RunRequest.cache_threshold).
// Input images (`images`, `strength`): checked, decoded and prepared by server/input_images.h
// (CPU work on the calling thread) into item.images / item.strength (and item.condition_images
// for use "qwen_edit"); with use "reference" a request without height (width) gets the first
// image's prepared height (width), with use "qwen_edit" the one calculated from the last image
// (imaging::QwenEditOutputSize), checked against the limits like any size (it takes precedence
// over the model's and --default-* sizes, as diffusers' Flux2Pipeline and
// QwenImageEditPlusPipeline do). With use "qwen_edit" a height (width) the request gives is first
// floored to image_inputs.size_multiple, as QwenImageEditPlusPipeline does, rather than refused.
absl::StatusOr<ValidatedRequest> ValidateRequest(const v1::GenerateRequest& request,
                                                 const worker::v1::ModelDescription& model,
                                                 const RequestLimits& limits);
// The same, with the request's images already decoded by DecodeInputImages(request, model,
// limits) (a call whose requests share their images decodes them once).
absl::StatusOr<ValidatedRequest> ValidateRequest(const v1::GenerateRequest& request,
                                                 const worker::v1::ModelDescription& model,
                                                 const RequestLimits& limits,
                                                 const DecodedInputImages& images);

// The public ModelInfo for a model description (its loaded LoRA adapters included) and the limits
// (inputs.image_inputs with the server's input image limits, PublicImageInputs; step_cache as
// described, always present: max_threshold 0 when the model offers no cache).
v1::ModelInfo MakeModelInfo(const worker::v1::ModelDescription& model, const RequestLimits& limits,
                            uint64_t max_queue, uint64_t max_batch);

}  // namespace ditserve::server
