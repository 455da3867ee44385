#include "pipeline/denoise_loop.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "comm/agree.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::pipeline {

namespace {

// A step whose work is queued on the device but maybe not done yet.
struct QueuedStep {
  compat::DeviceMark done;
  StepEvent event;                 // seconds filled in when it is reported
  int index = 0;                   // the scheduler's step
  torch::Tensor sample, velocity;  // for its preview; undefined without one
  int preview_index = -1;
};

// Reports queued steps in order, each once the device has done it. A step's time is the device's
// from the end of the previous step (or the loop's start, or the previous step's preview) to the
// step's own end (compat::DeviceMark), so it stays the step's own however late the host waits for
// it; a preview's decode is in no step's time.
class StepReporter {
 public:
  StepReporter(const FlowMatchEulerScheduler& scheduler, const LoopPreviews* previews,
               const std::function<void(const StepEvent&)>& on_step, torch::Device device)
      : scheduler_(scheduler), previews_(previews), on_step_(on_step), since_(device) {}

  void Report(QueuedStep& step) {
    step.done.Wait();
    step.event.seconds = step.done.SecondsSince(since_);
    if (step.preview_index >= 0) {
      const torch::Tensor sigma =
          scheduler_.sigmas()[step.index].to(step.velocity.device(), step.velocity.scalar_type());
      absl::StatusOr<std::vector<torch::Tensor>> images =
          previews_->decode(step.sample - sigma * step.velocity);
      if (images.ok()) {
        step.event.previews = *std::move(images);
        step.event.preview_index = step.preview_index;
      } else {
        spdlog::warn("preview after step {} of {} skipped: {}", step.event.step, step.event.total,
                     images.status().ToString());
      }
      since_ = compat::DeviceMark(step.velocity.device());  // after the decode's work
    } else {
      since_ = std::move(step.done);
    }
    if (on_step_) on_step_(step.event);
  }

 private:
  const FlowMatchEulerScheduler& scheduler_;
  const LoopPreviews* previews_;
  const std::function<void(const StepEvent&)>& on_step_;
  compat::DeviceMark since_;
};

}  // namespace

absl::StatusOr<torch::Tensor> RunDenoiseLoop(const FlowMatchEulerScheduler& scheduler,
                                             torch::Tensor latents, const VelocityFn& velocity,
                                             comm::Communicator& comm,
                                             const std::function<void(const StepEvent&)>& on_step,
                                             const std::function<bool()>& cancel_requested,
                                             int first_step, const LoopPreviews* previews) {
  const int last = scheduler.num_steps();
  if (first_step < 0 || first_step >= last) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first step ", first_step, " is outside the schedule's ", last, " steps"));
  }
  const int steps = last - first_step;
  StepReporter reporter(scheduler, previews, on_step, latents.device());
  std::optional<QueuedStep> queued;  // the step before this one, while the device may still run it
  for (int i = first_step; i < last; ++i) {
    const int done = i - first_step;
    const bool local_cancel = cancel_requested && cancel_requested();
    // A group of one agrees with itself on the host; a larger group's all-reduce reads its result
    // back, which waits for the queued step.
    ASSIGN_OR_RETURN(bool stop, comm::AgreeOnFlag(comm, local_cancel, latents.device()));
    if (stop) {
      if (queued) reporter.Report(*queued);
      return absl::CancelledError(absl::StrCat("cancelled before step ", done + 1, " of ", steps));
    }
    ASSIGN_OR_RETURN(torch::Tensor v, velocity(latents, i));
    const torch::Tensor sample = latents;
    ASSIGN_OR_RETURN(latents, scheduler.Step(v, i, latents));
    QueuedStep step{compat::DeviceMark(latents.device()), StepEvent{}, i, {}, {}, -1};
    step.event.step = static_cast<uint32_t>(done + 1);
    step.event.total = static_cast<uint32_t>(steps);
    if (previews != nullptr && comm.rank() == 0) {
      const auto& after = previews->after_steps;
      const auto it = std::find(after.begin(), after.end(), done + 1);
      if (it != after.end()) {
        step.sample = sample;
        step.velocity = v;
        step.preview_index = static_cast<int>(it - after.begin());
      }
    }
    if (queued) reporter.Report(*queued);
    queued.reset();
    // A preview's decode waits for its step before the next one is queued, so that the next
    // step's time does not take in the decode.
    if (step.preview_index >= 0) {
      reporter.Report(step);
    } else {
      queued.emplace(std::move(step));
    }
  }
  if (queued) reporter.Report(*queued);
  return latents;
}

std::vector<int> PreviewSteps(int steps, int count) {
  std::vector<int> out;
  for (int k = 0; k < count; ++k) {
    const int after = static_cast<int>(static_cast<int64_t>(steps) * (k + 1) / (count + 1));
    if (after > 0 && (out.empty() || out.back() != after)) out.push_back(after);
  }
  return out;
}

torch::Tensor ModelTimestep(const torch::Tensor& timesteps, int index, int64_t batch,
                            torch::ScalarType dtype) {
  return timesteps[index].expand({batch}).to(dtype) / 1000;
}

}  // namespace ditserve::pipeline
