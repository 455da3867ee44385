// The one place where the worker's wire messages meet the engine's typed values:
// - RunRequest -> GenerationJob (tensors decoded, input images and qwen_edit's condition images
//   as uint8 (H, W, 3) tensors with their byte counts checked (an item's condition_images are
//   none or one per image), preview_images and cache_threshold within the job's bounds, field
//   names in errors), GenerationResult -> RunResult (per item the encoded image or the latents,
//   the stage timings and the full / cached transformer passes; the frontend builds the public
//   response's metadata), StepEvent -> RunEvent progress;
// - InitRequest -> InitConfig (every string value parsed with common/model_flags.h, errors naming
//   the request field), InitProgress -> InitEvent, InitReport -> the "ready" InitEvent
//   (ModelCard -> ModelDescription, ImageInputCard -> inputs.image_inputs with use "reference",
//   "image_to_image", "kontext" or "qwen_edit" and min_images, max_cache_threshold -> step_cache
//   {kFirstBlockCacheMethod, max_threshold});
// - Rendezvous <-> GroupRendezvous, EngineStatus -> WorkerStatus (cached_steps included).
//
// Stateless functions; safe from any thread. They run on RPC handler threads: the torch-touching
// ones (tensor decoding, image and latents encoding) are guarded, so torch errors come back as
// Status and no exception leaves.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "pipeline/job.h"
#include "pipeline/pipeline.h"
#include "worker/engine_types.h"

namespace ditserve::worker {

// ModelDescription.step_cache.method: diffusers' First Block Cache (FirstBlockCacheConfig).
inline constexpr char kFirstBlockCacheMethod[] = "first_block_cache";

// INVALID_ARGUMENT naming the field for preview_images over GenerationJob::kMaxPreviewImages and a
// cache_threshold that is not in 0..GenerationJob::kMaxCacheThreshold (NaN included).
absl::StatusOr<pipeline::GenerationJob> JobFromRunRequest(const v1::RunRequest& request);

// `result` is rank 0's (one image or latents tensor per item, encoded into RunResult.outputs in the
// items' order); other ranks pass theirs and get a RunResult with the timings and the pass counts
// only.
absl::StatusOr<v1::RunResult> RunResultFromGeneration(const v1::RunRequest& request,
                                                      const pipeline::GenerationResult& result,
                                                      const pipeline::ModelCard& card);

// A step's progress, with its previews as PNGs (encoded here, on the RPC handler thread that
// writes the event: the engine thread only hands over the tensors).
v1::RunEvent RunEventFromStep(const pipeline::StepEvent& step);

// Empty strings take the defaults (float32, cpu, auto, merge, dtype); INVALID_ARGUMENT naming the
// field otherwise ("dtype must be float32 or bfloat16, got 'x'", "cuda_graphs must be in 0..64").
absl::StatusOr<InitConfig> InitConfigFromRequest(const v1::InitRequest& request);

v1::InitEvent InitEventFromProgress(const InitProgress& progress);
// Phase "ready" with the model.
v1::InitEvent ReadyEvent(const InitReport& report);

v1::ModelDescription DescribeModel(const pipeline::ModelCard& card, uint32_t tp_degree,
                                   uint64_t weight_bytes);

GroupRendezvous RendezvousFromProto(const v1::Rendezvous& proto);
v1::Rendezvous RendezvousToProto(const GroupRendezvous& rendezvous);

v1::WorkerStatus WorkerStatusToProto(const EngineStatus& status);

}  // namespace ditserve::worker
