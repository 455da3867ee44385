#include "sharding/loader.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "sharding/plan_resolver.h"
#include "sharding/safetensors_writer.h"
#include "sharding/slicing.h"
#include "sharding/torch_tensor.h"

namespace ditserve::sharding {
namespace {

bool IsTorchFloat(torch::ScalarType t) {
  return t == torch::kFloat64 || t == torch::kFloat32 || t == torch::kFloat16 ||
         t == torch::kBFloat16;
}

// One tensor to load: where it is, how it is sliced, what it becomes.
struct LoadJob {
  const SafetensorsFile* file;
  const TensorInfo* info;
  const PlannedTensor* planned;
  RankSlice slice;
  torch::ScalarType src_type;
  torch::ScalarType dst_type;
  uint64_t rank_bytes;  // stored bytes this rank reads
};

// Reads the byte runs of one job into a destination tensor, through the staging buffer or, when
// no conversion or device copy is needed, straight into the destination.
class SliceReader {
 public:
  SliceReader(uint64_t staging_bytes, const LoadOptions& opts, uint64_t total)
      : staging_bytes_(staging_bytes), opts_(opts), total_(total) {}

  absl::Status Load(const LoadJob& job, torch::Tensor dst) {
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    ForEachByteRun(job.info->shape, job.slice, DTypeSize(job.info->dtype),
                   [&](uint64_t off, uint64_t len) { runs.emplace_back(off, len); });
    const bool direct = dst.device().is_cpu() && job.src_type == job.dst_type;
    return direct ? LoadDirect(job, runs, dst) : LoadStaged(job, runs, dst);
  }

  void Finish() {
    if (opts_.progress) opts_.progress(loaded_, total_);
  }

 private:
  absl::Status LoadDirect(const LoadJob& job,
                          const std::vector<std::pair<uint64_t, uint64_t>>& runs,
                          torch::Tensor dst) {
    auto* out = static_cast<uint8_t*>(dst.data_ptr());
    for (const auto& [off, len] : runs) {
      // Chunked so that progress reports at staging granularity on large tensors too.
      for (uint64_t done = 0; done < len;) {
        const uint64_t take = std::min<uint64_t>(len - done, ChunkBytes(job));
        RETURN_IF_ERROR(job.file->ReadTensorBytes(*job.info, off + done, take, out));
        out += take;
        done += take;
        Advance(take);
      }
    }
    return absl::OkStatus();
  }

  absl::Status LoadStaged(const LoadJob& job,
                          const std::vector<std::pair<uint64_t, uint64_t>>& runs,
                          torch::Tensor dst) {
    if (!staging_) staging_.reset(new uint8_t[staging_bytes_]);
    const uint64_t esize = DTypeSize(job.info->dtype);
    const uint64_t cap = ChunkBytes(job);
    torch::Tensor flat = dst.view({-1});
    int64_t dst_elem = 0;
    uint64_t fill = 0;
    auto flush = [&]() -> absl::Status {
      if (fill == 0) return absl::OkStatus();
      const int64_t count = static_cast<int64_t>(fill / esize);
      RETURN_IF_ERROR(GuardTorchStatus("loading a tensor slice", [&] {
        torch::Tensor src = torch::from_blob(staging_.get(), {count},
                                             torch::TensorOptions().dtype(job.src_type));
        // Synchronous copy (converts dtype and crosses devices); the staging buffer is reused
        // right after, so it must not be non_blocking.
        flat.narrow(0, dst_elem, count).copy_(src);
      }));
      dst_elem += count;
      Advance(fill);
      fill = 0;
      return absl::OkStatus();
    };
    for (auto [off, len] : runs) {
      while (len > 0) {
        const uint64_t take = std::min(len, cap - fill);
        RETURN_IF_ERROR(job.file->ReadTensorBytes(*job.info, off, take, staging_.get() + fill));
        fill += take;
        off += take;
        len -= take;
        if (fill == cap) RETURN_IF_ERROR(flush());
      }
    }
    return flush();
  }

  // Whole elements only, so each flush converts complete values.
  uint64_t ChunkBytes(const LoadJob& job) const {
    const uint64_t esize = DTypeSize(job.info->dtype);
    return staging_bytes_ / esize * esize;
  }

  void Advance(uint64_t bytes) {
    loaded_ += bytes;
    since_report_ += bytes;
    if (opts_.progress && since_report_ >= staging_bytes_) {
      since_report_ = 0;
      opts_.progress(loaded_, total_);
    }
  }

  const uint64_t staging_bytes_;
  const LoadOptions& opts_;
  const uint64_t total_;
  std::unique_ptr<uint8_t[]> staging_;
  uint64_t loaded_ = 0;
  uint64_t since_report_ = 0;
};

absl::Status ValidateOptions(const LoadOptions& opts) {
  if (opts.dtype != torch::kFloat32 && opts.dtype != torch::kBFloat16 &&
      opts.dtype != torch::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("load dtype must be float32, bfloat16 or float16, got ",
                     c10::toString(opts.dtype)));
  }
  if (opts.staging_buffer_bytes < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging_buffer_bytes must hold at least one 8-byte element, got ",
        opts.staging_buffer_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardedStateDict> LoadShard(const ComponentCheckpoint& ckpt, const TpPlan* plan,
                                           int rank, int world_size, const LoadOptions& opts) {
  RETURN_IF_ERROR(ValidateOptions(opts));
  ASSIGN_OR_RETURN(ResolvedPlan resolved, ResolveTpPlan(plan, ckpt, world_size));
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the tensor-parallel group of ", world_size));
  }

  // Plan every tensor (and check its dtype) before reading anything.
  std::vector<LoadJob> jobs;
  jobs.reserve(resolved.tensors.size());
  std::map<const SafetensorsFile*, size_t> file_order;
  uint64_t total = 0;
  for (const PlannedTensor& t : resolved.tensors) {
    if (opts.select && !opts.select(t.name)) continue;
    ASSIGN_OR_RETURN(TensorLocation loc, ckpt.Find(t.name));
    auto src_type = TorchDType(loc.info->dtype);
    if (!src_type.ok()) {
      return absl::Status(src_type.status().code(),
                          absl::StrCat(loc.file->path(), ": tensor '", t.name, "': ",
                                       src_type.status().message()));
    }
    LoadJob job{loc.file, loc.info, &t, SliceForRank(t, rank, world_size), *src_type,
                IsTorchFloat(*src_type) ? opts.dtype : *src_type, 0};
    job.rank_bytes = job.slice.numel() * DTypeSize(loc.info->dtype);
    total += job.rank_bytes;
    file_order.emplace(loc.file, file_order.size());
    jobs.push_back(std::move(job));
  }
  // File order, then offset order: sequential reads, which the kernel's readahead likes.
  std::sort(jobs.begin(), jobs.end(), [&](const LoadJob& a, const LoadJob& b) {
    const size_t fa = file_order[a.file], fb = file_order[b.file];
    return fa != fb ? fa < fb : a.info->begin < b.info->begin;
  });

  SliceReader reader(opts.staging_buffer_bytes, opts, total);
  std::map<std::string, torch::Tensor> tensors;
  for (const LoadJob& job : jobs) {
    ASSIGN_OR_RETURN(torch::Tensor dst, GuardTorch("allocating a tensor slice", [&] {
                       return torch::empty(job.slice.local_shape, torch::TensorOptions()
                                                                      .dtype(job.dst_type)
                                                                      .device(opts.device));
                     }));
    if (dst.numel() > 0) RETURN_IF_ERROR(reader.Load(job, dst));
    tensors.emplace(job.planned->name, std::move(dst));
  }
  reader.Finish();

  return ShardedStateDict(rank, world_size, std::move(tensors),
                          ModuleShardingsOf(resolved, world_size));
}

std::map<std::string, ModuleSharding> ModuleShardingsOf(const ResolvedPlan& resolved,
                                                        int world_size) {
  std::map<std::string, ModuleSharding> modules;
  for (const auto& [path, m] : resolved.modules) {
    ModuleSharding ms;
    ms.style = m.style;
    if (m.style == TpStyle::kPackedColwise || m.style == TpStyle::kPackedRowwise) {
      ms.local_blocks = LocalBlocks(m.blocks, world_size);
    }
    modules.emplace(path, std::move(ms));
  }
  return modules;
}

absl::StatusOr<torch::Tensor> ReadTensorSlice(const SafetensorsFile& file, const TensorInfo& info,
                                              const RankSlice& slice, const LoadOptions& opts) {
  RETURN_IF_ERROR(ValidateOptions(opts));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": tensor '", info.name, "' ", absl::StrJoin(info.shape, "x"),
                     ": ", why));
  };
  if (slice.local_shape.size() != info.shape.size()) return bad("slice of another rank");
  if (slice.dim >= 0) {
    if (slice.dim >= static_cast<int>(info.shape.size())) return bad("slice dim out of range");
    int64_t local = 0;
    for (const auto& [b, e] : slice.ranges) {
      if (b < 0 || e < b || e > info.shape[slice.dim]) {
        return bad(absl::StrCat("range [", b, ", ", e, ") leaves dim ", slice.dim));
      }
      local += e - b;
    }
    for (size_t i = 0; i < info.shape.size(); ++i) {
      const int64_t want = static_cast<int>(i) == slice.dim ? local : info.shape[i];
      if (slice.local_shape[i] != want) return bad("slice shape does not match its ranges");
    }
  } else if (slice.local_shape != info.shape) {
    return bad("whole-tensor slice of another shape");
  }
  ASSIGN_OR_RETURN(torch::ScalarType src_type, TorchDType(info.dtype));
  const torch::ScalarType dst_type = IsTorchFloat(src_type) ? opts.dtype : src_type;
  PlannedTensor planned;
  planned.name = info.name;
  LoadJob job{&file, &info, &planned, slice, src_type, dst_type,
              slice.numel() * DTypeSize(info.dtype)};
  ASSIGN_OR_RETURN(torch::Tensor dst, GuardTorch("allocating a tensor slice", [&] {
                     return torch::empty(slice.local_shape,
                                         torch::TensorOptions().dtype(dst_type).device(opts.device));
                   }));
  LoadOptions quiet = opts;
  quiet.progress = nullptr;
  // Small tensors (LoRA factors) get a staging buffer of their own size, not the whole 64 MiB.
  const uint64_t staging = std::max<uint64_t>(8, std::min(opts.staging_buffer_bytes, job.rank_bytes));
  SliceReader reader(staging, quiet, job.rank_bytes);
  if (dst.numel() > 0) RETURN_IF_ERROR(reader.Load(job, dst));
  return dst;
}

absl::StatusOr<ShardedStateDict> LoadShard(const std::string& component_dir, const TpPlan* plan,
                                           int rank, int world_size, const LoadOptions& opts) {
  ASSIGN_OR_RETURN(auto ckpt, ComponentCheckpoint::Open(component_dir));
  return LoadShard(*ckpt, plan, rank, world_size, opts);
}

absl::Status SaveShardedStateDict(const ShardedStateDict& state, const std::string& path) {
  size_t sharded = 0;
  std::string example;
  for (const auto& [module, ms] : state.modules()) {
    if (ms.style == TpStyle::kReplicated) continue;
    if (sharded++ == 0) example = module;
  }
  if (state.world_size() > 1 || sharded > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "saving a tensor-parallel sharded model is not supported: rank ", state.rank(), " of ",
        state.world_size(), " holds only its slices of ", sharded, " planned modules",
        example.empty() ? "" : absl::StrCat(" (e.g. '", example, "')"),
        "; load the checkpoint with world_size 1 and no plan to save it (", path, ")"));
  }
  std::vector<torch::Tensor> keep;  // CPU contiguous copies, alive until written
  std::vector<TensorToWrite> out;
  RETURN_IF_ERROR(GuardTorchStatus("preparing tensors to save", [&] {
    for (const auto& [name, t] : state.tensors()) keep.push_back(t.cpu().contiguous());
  }));
  size_t i = 0;
  for (const auto& [name, t] : state.tensors()) {
    ASSIGN_OR_RETURN(DType dtype, SafetensorsDType(keep[i].scalar_type()));
    out.push_back({name, dtype, keep[i].sizes().vec(), keep[i].data_ptr()});
    ++i;
  }
  return WriteSafetensors(path, out, {{"format", "pt"}});
}

}  // namespace ditserve::sharding
