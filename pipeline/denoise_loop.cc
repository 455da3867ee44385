#include "pipeline/denoise_loop.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "comm/agree.h"

namespace ditserve::pipeline {

absl::StatusOr<torch::Tensor> RunDenoiseLoop(const FlowMatchEulerScheduler& scheduler,
                                             torch::Tensor latents, const VelocityFn& velocity,
                                             comm::Communicator& comm,
                                             const std::function<void(const StepEvent&)>& on_step,
                                             const std::function<bool()>& cancel_requested) {
  const int steps = scheduler.num_steps();
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const bool local_cancel = cancel_requested && cancel_requested();
    ASSIGN_OR_RETURN(bool stop, comm::AgreeOnFlag(comm, local_cancel, latents.device()));
    if (stop) {
      return absl::CancelledError(absl::StrCat("cancelled before step ", i + 1, " of ", steps));
    }
    ASSIGN_OR_RETURN(torch::Tensor v, velocity(latents, i));
    ASSIGN_OR_RETURN(latents, scheduler.Step(v, i, latents));
    compat::SynchronizeDevice(latents.device());  // so the step time is real
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_step) on_step(StepEvent{static_cast<uint32_t>(i + 1), static_cast<uint32_t>(steps), seconds});
  }
  return latents;
}

torch::Tensor ModelTimestep(const FlowMatchEulerScheduler& scheduler, int index, int64_t batch,
                            torch::ScalarType dtype, torch::Device device) {
  torch::Tensor t = scheduler.timesteps()[index].expand({batch}).to(device, dtype);
  return t / 1000;
}

}  // namespace ditserve::pipeline
