// One LoRA adapter file, loaded for one tensor-parallel rank: this rank's slices of every target's
// A and B, sliced the way the base layer is (models/tp):
//   replicated                    A and B whole
//   colwise / packed colwise      B's rows of this rank (packed: block by block), A whole
//   rowwise / rowwise_split_input A's columns of this rank, B whole
//   packed rowwise                A's columns of this rank, block by block, B whole
// so that x_local · Aᵀ · Bᵀ is this rank's share of the layer's delta exactly as x_local · Wᵀ is
// of its output. Each rank reads only its slices (sharding::ReadTensorSlice); fused kohya layers
// (q|k|v) give each of our modules its rows of the stored B.
//
// Load checks every target against the model before reading: the module exists (a linear layer of
// the model: LinearRegistry), and A's input width and B's rows equal the layer's global widths;
// INVALID_ARGUMENT naming the adapter, the module and the sizes otherwise.
//
// Ownership: owns its tensors (on the model's device, in its dtype). Thread-safety: immutable
// after Load.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "models/common/linear_registry.h"
#include "models/lora/lora_format.h"
#include "sharding/loader.h"

namespace ditserve::lora {

struct LoraAdapterSpec {
  std::string name;
  std::string path;  // a file or a folder holding one (lora_files.h's rule)
};

struct LoraModuleSlices {
  torch::Tensor a;  // (r, this rank's in)
  torch::Tensor b;  // (this rank's out, r)
  double scale = 1.0;
};

class LoraAdapter {
 public:
  // `layers`: the base model's (this rank's) linear layers; rank / world_size the group's;
  // opts.device / opts.dtype / opts.staging_buffer_bytes as for the base weights.
  static absl::StatusOr<LoraAdapter> Load(const LoraAdapterSpec& spec,
                                          const models::LinearRegistry& layers, int rank,
                                          int world_size, const sharding::LoadOptions& opts);

  const std::string& name() const { return name_; }
  const std::string& file() const { return file_; }
  LoraFormat format() const { return format_; }
  int64_t max_rank() const { return max_rank_; }
  const std::map<std::string, LoraModuleSlices>& modules() const { return modules_; }
  // Bytes of this rank's slices.
  uint64_t bytes() const { return bytes_; }

 private:
  std::string name_, file_;
  LoraFormat format_ = LoraFormat::kDiffusers;
  int64_t max_rank_ = 0;
  std::map<std::string, LoraModuleSlices> modules_;
  uint64_t bytes_ = 0;
};

// Global (unsharded) widths of a rank's layer, and the ranges of its rows / columns this rank
// holds, in the global index space (for slicing a LoRA factor like the layer).
struct LayerGeometry {
  int64_t in_features = 0;
  int64_t out_features = 0;
  // [begin, end) of the global rows / columns, in the layer's local order (packed: block by block).
  std::vector<std::pair<int64_t, int64_t>> local_rows;  // of out_features
  std::vector<std::pair<int64_t, int64_t>> local_cols;  // of in_features
};
LayerGeometry GeometryOf(const models::LinearLayer& layer, int rank, int world_size);

}  // namespace ditserve::lora
