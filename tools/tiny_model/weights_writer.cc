#include "tools/tiny_model/weights_writer.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "sharding/safetensors_writer.h"
#include "tools/tiny_model/file_util.h"
#include "tools/tiny_model/random_init.h"

namespace ditserve::tiny_model {

namespace {

uint64_t SpecBytes(const TensorSpec& spec, sharding::DType dtype) {
  uint64_t n = sharding::DTypeSize(dtype);
  for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Generates specs[first, last) on up to `threads` threads (values are seeded per tensor name, so
// this gives the bytes one thread would) into `data`.
absl::Status GenerateBatch(const std::vector<TensorSpec>& specs, size_t first, size_t last,
                           uint64_t seed, sharding::DType dtype, size_t threads,
                           std::vector<std::vector<uint8_t>>& data) {
  std::vector<absl::Status> errors(last - first);
  std::atomic<size_t> next{first};
  auto work = [&] {
    for (size_t i = next++; i < last; i = next++) {
      auto bytes = InitialBytes(specs[i], seed, dtype);
      if (bytes.ok()) {
        data[i - first] = std::move(*bytes);
      } else {
        errors[i - first] = bytes.status();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(threads, last - first); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const absl::Status& e : errors) RETURN_IF_ERROR(e);
  return absl::OkStatus();
}

// Tensor names are unique (specs sorted by name), the shard count fits them, the dtype is one a
// tiny model is written in.
absl::Status CheckComponentArgs(const std::vector<TensorSpec>& specs, sharding::DType dtype,
                                int num_shards) {
  for (size_t i = 1; i < specs.size(); ++i) {
    if (specs[i].name == specs[i - 1].name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name ", specs[i].name));
    }
  }
  if (num_shards < 1 || static_cast<size_t>(num_shards) > std::max<size_t>(specs.size(), 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", specs.size(), " tensors into ", num_shards, " shards"));
  }
  if (dtype != sharding::DType::kF32 && dtype != sharding::DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tiny model weights are float32 or bfloat16, not ", sharding::DTypeName(dtype)));
  }
  return absl::OkStatus();
}

// The shard of each tensor. Shard s takes tensors until the running byte count reaches
// (s + 1) / num_shards of the total, leaving at least one tensor for each later shard.
std::vector<size_t> AssignShards(const std::vector<uint64_t>& sizes, uint64_t total,
                                 int num_shards) {
  std::vector<size_t> shard_of(sizes.size(), 0);
  uint64_t running = 0;
  size_t shard = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    shard_of[i] = shard;
    running += sizes[i];
    const size_t remaining_tensors = sizes.size() - i - 1;
    const size_t remaining_shards = static_cast<size_t>(num_shards) - shard - 1;
    const bool full = running * num_shards >= total * (shard + 1);
    if (remaining_shards > 0 && (full || remaining_tensors == remaining_shards)) ++shard;
  }
  return shard_of;
}

// Generates specs[first, last) and appends them to `writer` in order, in batches of about
// kBatchBytes (at least one tensor), so memory stays bounded whatever the component's size
// (FLUX.1-dev's transformer is 24 GB in bfloat16).
absl::Status AppendInBatches(const std::vector<TensorSpec>& specs,
                             const std::vector<uint64_t>& sizes, size_t first, size_t last,
                             uint64_t largest, uint64_t seed, sharding::DType dtype,
                             size_t num_threads, sharding::SafetensorsFileWriter& writer) {
  constexpr uint64_t kBatchBytes = uint64_t{1} << 30;
  size_t i = first;
  while (i < last) {
    size_t end = i;
    uint64_t batch = 0;
    while (end < last && (end == i || batch + sizes[end] <= std::max(kBatchBytes, largest))) {
      batch += sizes[end++];
    }
    std::vector<std::vector<uint8_t>> data(end - i);
    RETURN_IF_ERROR(GenerateBatch(specs, i, end, seed, dtype, num_threads, data));
    for (const auto& bytes : data) RETURN_IF_ERROR(writer.Append(bytes.data(), bytes.size()));
    i = end;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WeightsWritten> WriteComponentWeights(const std::string& dir,
                                                     const std::string& base,
                                                     std::vector<TensorSpec> specs, uint64_t seed,
                                                     sharding::DType dtype, int num_shards,
                                                     int threads) {
  std::sort(specs.begin(), specs.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  RETURN_IF_ERROR(CheckComponentArgs(specs, dtype, num_shards));
  const size_t num_threads = threads > 0 ? static_cast<size_t>(threads)
                                         : std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint64_t> sizes(specs.size());
  uint64_t total = 0, largest = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    sizes[i] = SpecBytes(specs[i], dtype);
    total += sizes[i];
    largest = std::max(largest, sizes[i]);
  }
  const std::vector<size_t> shard_of = AssignShards(sizes, total, num_shards);

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  WeightsWritten written;
  written.tensors = static_cast<int64_t>(specs.size());
  written.bytes = total;
  nlohmann::json weight_map = nlohmann::json::object();
  size_t shard_begin = 0;
  for (int s = 0; s < num_shards; ++s) {
    const std::string file =
        num_shards == 1 ? absl::StrCat(base, ".safetensors")
                        : absl::StrFormat("%s-%05d-of-%05d.safetensors", base, s + 1, num_shards);
    size_t shard_end = shard_begin;
    while (shard_end < specs.size() && shard_of[shard_end] == static_cast<size_t>(s)) ++shard_end;
    std::vector<sharding::TensorToWrite> layout;
    for (size_t k = shard_begin; k < shard_end; ++k) {
      layout.push_back({specs[k].name, dtype, specs[k].shape, nullptr});
      weight_map[specs[k].name] = file;
    }
    ASSIGN_OR_RETURN(auto writer, sharding::SafetensorsFileWriter::Create(JoinPath(dir, file),
                                                                          layout, metadata));
    RETURN_IF_ERROR(AppendInBatches(specs, sizes, shard_begin, shard_end, largest, seed, dtype,
                                    num_threads, *writer));
    RETURN_IF_ERROR(writer->Finish());
    written.files.push_back(file);
    shard_begin = shard_end;
  }
  if (num_shards > 1) {
    const std::string index = absl::StrCat(base, ".safetensors.index.json");
    nlohmann::json index_json = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    RETURN_IF_ERROR(WriteFile(JoinPath(dir, index), ConfigJsonText(index_json)));
    written.files.push_back(index);
  }
  return written;
}

}  // namespace ditserve::tiny_model
