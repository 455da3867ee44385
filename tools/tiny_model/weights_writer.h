// Writes a component's weights the way save_pretrained does: tensors sorted by name,
// safetensors metadata {"format": "pt"}, either one "<base>.safetensors" or `num_shards` files
// "<base>-0000i-of-0000N.safetensors" plus "<base>.safetensors.index.json"
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}). `base` is
// "diffusion_pytorch_model" for diffusers components and "model" for transformers ones.
// Torch-free.
//
// Values come from random_init.h (seeded per tensor). Shards hold contiguous runs of the sorted
// names, balanced by bytes. Each file is written by sharding::SafetensorsFileWriter (tmp +
// rename) in batches of about 1 GiB generated on `threads` threads (0: one per core), so memory
// stays bounded for any component size.
//
// Thread-safety: stateless function (it starts and joins its own threads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharding/safetensors.h"
#include "tools/tiny_model/tensor_spec.h"

namespace ditserve::tiny_model {

struct WeightsWritten {
  int64_t tensors = 0;
  uint64_t bytes = 0;  // tensor data bytes (the index's total_size)
  std::vector<std::string> files;  // file names written, shards first then the index
};

// INVALID_ARGUMENT on duplicate names, num_shards < 1 or > the tensor count, or a dtype other than
// kF32 / kBF16; INTERNAL on I/O errors.
absl::StatusOr<WeightsWritten> WriteComponentWeights(const std::string& dir,
                                                     const std::string& base,
                                                     std::vector<TensorSpec> specs, uint64_t seed,
                                                     sharding::DType dtype, int num_shards = 1,
                                                     int threads = 0);

}  // namespace ditserve::tiny_model
