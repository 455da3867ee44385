// The per-rank loader (LibTorch adapter): rank r of n reads only its own bytes of every planned
// tensor (diffusers modeling_utils.py's from_pretrained), converts on the fly and places the slices on the target device.
//
//   ASSIGN_OR_RETURN(auto ckpt, ComponentCheckpoint::Open(dir));
//   ASSIGN_OR_RETURN(TpPlan plan, BuiltinTpPlan(ckpt->class_name(), ckpt->config()));
//   ASSIGN_OR_RETURN(ShardedStateDict sd, LoadShard(*ckpt, &plan, rank, world_size, opts));
//
// Everything is validated (checkpoint layout, headers, plan, divisibility, dtypes, rank) before a
// single tensor byte is read. Bytes come in with pread through one staging buffer of
// `staging_buffer_bytes` (colwise: one contiguous row range; rowwise: one column range per row;
// packed: one range per block), so no full planned weight is ever materialised and peak host
// memory is the destination tensors (on a CPU device) plus the staging buffer; page-cache pages are
// never mapped into the process. Same dtype on a CPU device: bytes go straight into the
// destination, without staging. The result is bit-identical to slicing the full tensor.
//
// Call order across ranks: none; every rank loads independently (no collective). Thread-safety:
// LoadShard may run concurrently on different ranks/threads; `progress` runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharding/checkpoint.h"
#include "sharding/plan_resolver.h"
#include "sharding/slicing.h"
#include "sharding/state_dict.h"
#include "sharding/tp_plan.h"

namespace ditserve::sharding {

struct LoadOptions {
  torch::Device device = torch::kCPU;
  // Floating tensors are converted to this (float32, bfloat16 or float16); others keep their dtype.
  torch::ScalarType dtype = torch::kFloat32;
  uint64_t staging_buffer_bytes = 64ull << 20;
  // Called after each staged chunk and once at the end with stored bytes read so far / in total.
  std::function<void(uint64_t bytes_loaded, uint64_t bytes_total)> progress;
  // When set, only tensors it accepts are read and returned (e.g. the text model of a
  // vision-language checkpoint, without its vision tower); the others' bytes are never read and
  // do not count in `progress`. The plan is still validated against every tensor.
  std::function<bool(const std::string& tensor_name)> select;
};

// How each planned module of `resolved` lies on a rank of `world_size` (packed styles: the local
// block sizes): the module table of a ShardedStateDict. LoadShard's, and the step benchmarks' for
// their random shards.
std::map<std::string, ModuleSharding> ModuleShardingsOf(const ResolvedPlan& resolved,
                                                        int world_size);

// `plan` null: every tensor replicated. world_size is the tensor-parallel degree.
absl::StatusOr<ShardedStateDict> LoadShard(const ComponentCheckpoint& ckpt, const TpPlan* plan,
                                           int rank, int world_size, const LoadOptions& opts);
// Opens `component_dir` first (see checkpoint.h).
absl::StatusOr<ShardedStateDict> LoadShard(const std::string& component_dir, const TpPlan* plan,
                                           int rank, int world_size, const LoadOptions& opts);

// Reads one stored tensor's `slice` (SliceForRank's, or any ranges a caller builds along one dim,
// e.g. a LoRA B's rows of one part of a fused tensor) the way LoadShard reads a planned tensor:
// only the slice's bytes, through opts' staging buffer, converted to opts.dtype when floating, on
// opts.device (opts.select and opts.progress are not used). INVALID_ARGUMENT naming the file and
// tensor when the slice does not fit the tensor's shape.
absl::StatusOr<torch::Tensor> ReadTensorSlice(const SafetensorsFile& file, const TensorInfo& info,
                                              const RankSlice& slice, const LoadOptions& opts);

// Writes a replicated state dict (world_size 1, nothing sharded) as one safetensors file.
// FAILED_PRECONDITION for a tensor-parallel sharded one: its tensors are slices (and packed slices
// are permutations), so no file written from one rank is a checkpoint.
absl::Status SaveShardedStateDict(const ShardedStateDict& state, const std::string& path);

}  // namespace ditserve::sharding
