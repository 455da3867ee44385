// The denoising loop shared by every pipeline: for each scheduler step, agree collectively on
// cancellation, call the model for the velocity, take the Euler step, report progress.
//
// Call order across ranks: every rank runs the loop with the same scheduler and latents shape;
// the per-step AgreeOnFlag all-reduce comes before the model call, so all ranks stop at the same
// boundary (CANCELLED) and nobody is left inside the model's all-reduces.
#pragma once

#include <functional>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"

namespace ditserve::pipeline {

// Returns the velocity for `latents` at step `index` (the scheduler's timesteps()[index]).
using VelocityFn =
    std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor& latents, int index)>;

// Runs the scheduler's steps from `first_step` (image-to-image starts part-way, diffusers'
// set_begin_index) to the last; progress counts the steps run (1 .. num_steps - first_step).
absl::StatusOr<torch::Tensor> RunDenoiseLoop(const FlowMatchEulerScheduler& scheduler,
                                             torch::Tensor latents, const VelocityFn& velocity,
                                             comm::Communicator& comm,
                                             const std::function<void(const StepEvent&)>& on_step,
                                             const std::function<bool()>& cancel_requested,
                                             int first_step = 0);

// The model's timestep argument for step `index` as the FLUX pipelines build it:
// t.expand(B).to(dtype) / 1000, the division done in `dtype` (diffusers pipeline_flux.py).
torch::Tensor ModelTimestep(const FlowMatchEulerScheduler& scheduler, int index, int64_t batch,
                            torch::ScalarType dtype, torch::Device device);

}  // namespace ditserve::pipeline
