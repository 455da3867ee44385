// The denoising loop shared by every pipeline: for each scheduler step, agree collectively on
// cancellation, call the model for the velocity, take the Euler step, report progress.
//
// Queue ahead: step i+1 is queued on the device before the host waits for step i to report it
// (compat::DeviceMark), so the device does not idle while the host launches a step. A step's
// reported time is the device's, from the end of the previous step to its own end; a step with a
// preview is waited for (and its preview decoded) before the next is queued, and the decode is in
// no step's time. In a group of one, cancellation is agreed on the host; a larger group's per-step
// all-reduce reads its flag back, which waits for the queued step.
//
// Call order across ranks: every rank runs the loop with the same scheduler and latents shape;
// the per-step AgreeOnFlag all-reduce comes before the model call, so all ranks stop at the same
// boundary (CANCELLED) and nobody is left inside the model's all-reduces.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "pipeline/pipeline.h"
#include "pipeline/scheduler.h"

namespace ditserve::pipeline {

// Returns the velocity for `latents` at step `index` (the scheduler's timesteps()[index]).
using VelocityFn =
    std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor& latents, int index)>;

// Previews of the clean latents during the loop (rank 0): after each step count in `after_steps`
// (1-based, counted from the first step run), x0 = x - sigma_i * v (flow matching's prediction of
// the clean latents from the step's sample and velocity) goes through `decode` (loop layout ->
// per-item images) into that step's StepEvent. A failed decode is logged and skipped: a preview
// never fails the job.
struct LoopPreviews {
  std::vector<int> after_steps;
  std::function<absl::StatusOr<std::vector<torch::Tensor>>(const torch::Tensor& x0)> decode;
};

// The step counts after which `count` previews of a `steps`-step loop are taken: evenly spaced,
// floor(steps * (k + 1) / (count + 1)) for k < count, without 0 or repeats.
std::vector<int> PreviewSteps(int steps, int count);

// Runs the scheduler's steps from `first_step` (image-to-image starts part-way, diffusers'
// set_begin_index) to the last; progress counts the steps run (1 .. num_steps - first_step).
absl::StatusOr<torch::Tensor> RunDenoiseLoop(const FlowMatchEulerScheduler& scheduler,
                                             torch::Tensor latents, const VelocityFn& velocity,
                                             comm::Communicator& comm,
                                             const std::function<void(const StepEvent&)>& on_step,
                                             const std::function<bool()>& cancel_requested,
                                             int first_step = 0,
                                             const LoopPreviews* previews = nullptr);

// The model's timestep argument for step `index` as the FLUX pipelines build it:
// t.expand(B).to(dtype) / 1000, the division done in `dtype` (diffusers pipeline_flux.py).
// `timesteps` is the scheduler's timesteps() moved to the model's device once per job, so that a
// step makes no host-to-device copy (one waits for the device: the loop could not run ahead).
torch::Tensor ModelTimestep(const torch::Tensor& timesteps, int index, int64_t batch,
                            torch::ScalarType dtype);

}  // namespace ditserve::pipeline
