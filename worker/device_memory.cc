#include "worker/device_memory.h"

#include "common/torch_compat.h"
#include "metrics/process_metrics.h"

#ifdef DITSERVE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ditserve::worker {

DeviceMemoryInfo QueryDeviceMemory(torch::Device device) {
  DeviceMemoryInfo info;
#ifdef DITSERVE_WITH_CUDA
  if (device.is_cuda()) {
    compat::CudaAllocatorBytes(device.index(), &info.allocated, &info.peak_allocated, &info.reserved);
    // Not cudaMemGetInfo: it reports the calling thread's current device, and the status RPC runs
    // on a handler thread, not the engine thread that owns the rank's device.
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) info.total = prop.totalGlobalMem;
  }
#endif
  return info;
}

uint64_t ResidentBytes() {
  absl::StatusOr<metrics::ProcessStats> stats = metrics::ReadProcessStats();
  return stats.ok() ? static_cast<uint64_t>(stats->resident_memory_bytes) : 0;
}

}  // namespace ditserve::worker
