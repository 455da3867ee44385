#include "worker/device_memory.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"

#ifdef DITSERVE_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace ditserve::worker {
#ifdef DITSERVE_WITH_CUDA
namespace {
int g_device = -1;  // the CUDA device SelectDevice picked, for the memory gauges
}  // namespace
#endif

absl::StatusOr<torch::Device> SelectDevice(const std::string& device, uint32_t rank,
                                           int64_t device_index) {
  if (device == "cpu" || device.empty()) return torch::Device(torch::kCPU);
  if (device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("device must be cpu or cuda, got '", device, "'"));
  }
#ifdef DITSERVE_WITH_CUDA
  const int count = static_cast<int>(c10::cuda::device_count());
  if (count == 0) return absl::FailedPreconditionError("device cuda requested but no CUDA device is visible");
  const int index = device_index >= 0 ? static_cast<int>(device_index) : static_cast<int>(rank % count);
  if (index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device-index ", index, " but only ", count, " CUDA devices are visible"));
  }
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  g_device = index;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#else
  return absl::FailedPreconditionError(
      "device cuda requested but this is the CPU build of ditserve (configure with -DDITSERVE_CUDA=ON)");
#endif
}

DeviceMemoryInfo QueryDeviceMemory() {
  DeviceMemoryInfo info;
#ifdef DITSERVE_WITH_CUDA
  if (g_device >= 0) {
    compat::CudaAllocatorBytes(g_device, &info.allocated, &info.peak_allocated, &info.reserved);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) info.total = total_bytes;
  }
#endif
  return info;
}

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace ditserve::worker
