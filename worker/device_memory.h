// Memory figures of this process: device memory (CUDA caching allocator; zeros on CPU) and
// resident set size. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace ditserve::worker {

struct DeviceMemoryInfo {
  uint64_t allocated = 0;
  uint64_t peak_allocated = 0;  // highest `allocated` since the process started
  uint64_t reserved = 0;
  uint64_t total = 0;
};

// The device this rank computes on: "cpu", or "cuda" with `device_index` (-1: rank modulo the
// number of visible devices). Makes it the current CUDA device.
absl::StatusOr<torch::Device> SelectDevice(const std::string& device, uint32_t rank,
                                           int64_t device_index);

DeviceMemoryInfo QueryDeviceMemory();
uint64_t ResidentBytes();

}  // namespace ditserve::worker
