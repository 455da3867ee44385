#include "worker/device_binding.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "absl/strings/str_cat.h"
#include "common/torch_guard.h"

#ifdef DITSERVE_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ditserve::worker {
namespace {

class CpuBinding final : public DeviceBinding {
 public:
  torch::Device device() const override { return torch::kCPU; }
  absl::Status Bind() override { return absl::OkStatus(); }
  bool IsCurrent() const override { return true; }
};

// Any accelerator LibTorch has a device guard implementation for (CUDA here).
class TorchBinding final : public DeviceBinding {
 public:
  explicit TorchBinding(torch::Device device) : device_(device) {}
  torch::Device device() const override { return device_; }
  absl::Status Bind() override {
    return GuardTorchStatus("binding the device", [&] {
      c10::impl::getDeviceGuardImpl(device_.type())->setDevice(device_);
    });
  }
  bool IsCurrent() const override {
    auto current = GuardTorch("reading the current device", [&] {
      return c10::impl::getDeviceGuardImpl(device_.type())->getDevice();
    });
    return current.ok() && *current == device_;
  }

 private:
  torch::Device device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceBinding>> BindTorchDevice(DeviceKind device, uint32_t rank,
                                                               int64_t device_index) {
  if (device == DeviceKind::kCpu) return std::unique_ptr<DeviceBinding>(new CpuBinding());
#ifdef DITSERVE_WITH_CUDA
  const int count = static_cast<int>(c10::cuda::device_count());
  if (count == 0) {
    return absl::FailedPreconditionError("device cuda requested but no CUDA device is visible");
  }
  const int index = device_index >= 0 ? static_cast<int>(device_index) : static_cast<int>(rank % count);
  if (index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device-index ", index, " but only ", count, " CUDA devices are visible"));
  }
  return std::unique_ptr<DeviceBinding>(
      new TorchBinding(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index))));
#else
  (void)rank;
  (void)device_index;
  return absl::FailedPreconditionError(
      "device cuda requested but this is the CPU build of ditserve (configure with -DDITSERVE_CUDA=ON)");
#endif
}

}  // namespace ditserve::worker
