#include "pipeline/denoise_loop.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "comm/agree.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::pipeline {

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
  for (int i = first_step; i < last; ++i) {
    const int done = i - first_step;
    const auto start = std::chrono::steady_clock::now();
    const bool local_cancel = cancel_requested && cancel_requested();
    ASSIGN_OR_RETURN(bool stop, comm::AgreeOnFlag(comm, local_cancel, latents.device()));
    if (stop) {
      return absl::CancelledError(absl::StrCat("cancelled before step ", done + 1, " of ", steps));
    }
    ASSIGN_OR_RETURN(torch::Tensor v, velocity(latents, i));
    const torch::Tensor sample = latents;
    ASSIGN_OR_RETURN(latents, scheduler.Step(v, i, latents));
    compat::SynchronizeDevice(latents.device());  // so the step time is real
    StepEvent event{
        static_cast<uint32_t>(done + 1), static_cast<uint32_t>(steps),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
    if (previews != nullptr && comm.rank() == 0) {
      const auto& after = previews->after_steps;
      const auto it = std::find(after.begin(), after.end(), done + 1);
      if (it != after.end()) {
        const torch::Tensor sigma = scheduler.sigmas()[i].to(v.device(), v.scalar_type());
        absl::StatusOr<std::vector<torch::Tensor>> images = previews->decode(sample - sigma * v);
        if (images.ok()) {
          event.previews = *std::move(images);
          event.preview_index = static_cast<int>(it - after.begin());
        } else {
          spdlog::warn("preview after step {} of {} skipped: {}", done + 1, steps,
                       images.status().ToString());
        }
      }
    }
    if (on_step) on_step(event);
  }
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

torch::Tensor ModelTimestep(const FlowMatchEulerScheduler& scheduler, int index, int64_t batch,
                            torch::ScalarType dtype, torch::Device device) {
  torch::Tensor t = scheduler.timesteps()[index].expand({batch}).to(device, dtype);
  return t / 1000;
}

}  // namespace ditserve::pipeline
