// DeviceBinding: makes a rank's device the current device of the thread that computes on it.
//
// CUDA keeps a "current device" per host thread; kernels, allocations and streams without an
// explicit device go to it. The worker runs every job on one engine thread (engine_thread.h) that
// binds the rank's device once and checks before each job that it is still current, so no kernel
// path can run on another device (with the compose layout every worker sees every GPU).
//
// Thread-safety: Bind and IsCurrent act on the calling thread's state; an instance may be used from
// any thread but is meant for the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/model_flags.h"

namespace ditserve::worker {

class DeviceBinding {
 public:
  virtual ~DeviceBinding() = default;
  // The device the rank computes on.
  virtual torch::Device device() const = 0;
  // Makes device() current on the calling thread.
  virtual absl::Status Bind() = 0;
  // Whether device() is current on the calling thread (always true for the CPU).
  virtual bool IsCurrent() const = 0;
};

// Chooses the device of a rank: the CPU, or a CUDA device by `device_index` (-1: rank modulo the
// number of visible devices). INVALID_ARGUMENT / FAILED_PRECONDITION naming the flag when it cannot
// exist.
using DeviceBindingFactory = std::function<absl::StatusOr<std::unique_ptr<DeviceBinding>>(
    DeviceKind device, uint32_t rank, int64_t device_index)>;

// The real one: LibTorch's device guard implementation for the device type (CUDA in the CUDA
// variant); the CPU needs no binding.
absl::StatusOr<std::unique_ptr<DeviceBinding>> BindTorchDevice(DeviceKind device, uint32_t rank,
                                                               int64_t device_index);

}  // namespace ditserve::worker
