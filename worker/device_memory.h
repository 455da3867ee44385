// Memory figures of this process: device memory (CUDA caching allocator; zeros on CPU) and
// resident set size. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>


namespace ditserve::worker {

struct DeviceMemoryInfo {
  uint64_t allocated = 0;
  uint64_t peak_allocated = 0;  // highest `allocated` since the process started
  uint64_t reserved = 0;
  uint64_t total = 0;
};

// The CUDA caching allocator's figures for `device` (zeros for the CPU).
DeviceMemoryInfo QueryDeviceMemory(torch::Device device);
// This process's resident set size (metrics::ReadProcessStats, the figure /metrics exports as
// process_resident_memory_bytes); 0 if /proc cannot be read.
uint64_t ResidentBytes();

}  // namespace ditserve::worker
