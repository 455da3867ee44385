// Steps every pipeline family takes in the same way: collective agreement on a failure before the
// denoising loop, rank 0's conditioning broadcast, per-item seeded noise, request embeddings
// stacked into a batch, per-item scales as tensors, stage timing.
//
// Call order across ranks: AgreeOnFailure and BroadcastFromRank0 are collectives: every rank calls
// them at the same point of a job with the same arguments' shapes. The rest is local and pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "pipeline/job.h"

namespace ditserve::pipeline {

// Every rank passes its own outcome of a local step. If any rank failed, every rank returns an
// error with the same code (the highest failing code across the ranks): the failing rank its own
// status, the others "<what> failed on another rank". Nobody is left inside a collective, so the
// group stays usable.
absl::Status AgreeOnFailure(comm::Communicator& comm, const absl::Status& local, const char* what,
                            torch::Device device);

// Rank 0 runs `produce` (which fills `tensors` with contiguous tensors of `shapes`, dtype and
// device given; an exception it throws becomes its error); the ranks agree on its outcome (`what`
// names it in the other ranks' errors: "rank 0's text encoding"), the others allocate `shapes` and
// receive rank 0's tensors. On every rank `tensors` then holds rank 0's values.
absl::Status BroadcastFromRank0(
    comm::Communicator& comm, const char* what,
    const std::function<absl::Status(std::vector<torch::Tensor>*)>& produce,
    const std::vector<std::vector<int64_t>>& shapes, torch::ScalarType dtype, torch::Device device,
    std::vector<torch::Tensor>* tensors);

// torch::cat of each item's seeded noise of `item_shape` (leading dim 1), drawn as diffusers does
// with a CPU generator per item, in `dtype`, moved to `device`. `drawn_before`: the shapes the
// pipeline drew (in `dtype`) from the item's generator before the noise (FLUX.1 image-to-image:
// the VAE posterior's sample), drawn again here so the noise comes from the same generator state.
absl::StatusOr<torch::Tensor> BatchNoise(const GenerationJob& job,
                                         const std::vector<int64_t>& item_shape,
                                         torch::ScalarType dtype, torch::Device device,
                                         std::vector<std::vector<int64_t>> drawn_before = {});

// The items' request embeddings (negative ones if `negative`) stacked along the batch dim:
// `pick` selects the tensor of a PromptEmbeddings; `field` names it in errors (an item without
// embeddings, or shapes that differ).
absl::StatusOr<torch::Tensor> StackEmbeddings(
    const GenerationJob& job, bool negative,
    const std::function<torch::Tensor(const PromptEmbeddings&)>& pick, const char* field);

// (B) float32 guidance scales, and (B, 1, 1) true-CFG scales in `dtype`, on `device`.
torch::Tensor GuidanceScales(const GenerationJob& job, torch::Device device);
torch::Tensor TrueCfgScales(const GenerationJob& job, torch::ScalarType dtype,
                            torch::Device device);

// `latents` (the loop's layout) through `decode` (-> (B, C, H, W) in about [-1, 1]),
// post-processed into each item's (H, W, 3) float32 image in [0, 1] on the CPU. Guarded.
absl::StatusOr<std::vector<torch::Tensor>> DecodeImages(
    const torch::Tensor& latents,
    const std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor&)>& decode);

// Rank 0's outputs from the final latents: for JobOutput::kLatents each item's latents, else
// `decode` (latents -> (B, C, H, W) in about [-1, 1]) post-processed into each item's (H, W, 3)
// image in [0, 1]; CPU float32 either way, with the time taken in result->seconds.decode.
absl::Status CollectOutputs(
    const GenerationJob& job, const torch::Tensor& latents,
    const std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor&)>& decode,
    GenerationResult* result);

// Seconds since `start`, for StageSeconds.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ditserve::pipeline
