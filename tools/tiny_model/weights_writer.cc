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

absl::StatusOr<WeightsWritten> WriteComponentWeights(const std::string& dir,
                                                     const std::string& base,
                                                     std::vector<TensorSpec> specs, uint64_t seed,
                                                     sharding::DType dtype, int num_shards) {
  std::sort(specs.begin(), specs.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  for (size_t i = 1; i < specs.size(); ++i) {
    if (specs[i].name == specs[i - 1].name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name ", specs[i].name));
    }
  }
  if (num_shards < 1 || static_cast<size_t>(num_shards) > std::max<size_t>(specs.size(), 1)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot split ", specs.size(),
                                                   " tensors into ", num_shards, " shards"));
  }

  // Values are seeded per tensor name, so generating tensors on several threads gives the same
  // bytes as one thread (full-size presets hold billions of values).
  std::vector<std::vector<uint8_t>> data(specs.size());
  std::vector<absl::Status> errors(specs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < specs.size(); i = next++) {
      auto bytes = InitialBytes(specs[i], seed, dtype);
      if (bytes.ok()) {
        data[i] = std::move(*bytes);
      } else {
        errors[i] = bytes.status();
      }
    }
  };
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), specs.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  uint64_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    RETURN_IF_ERROR(errors[i]);
    total += data[i].size();
  }

  // Shard s takes tensors until the running byte count reaches (s + 1) / num_shards of the total,
  // leaving at least one tensor for each later shard.
  std::vector<size_t> shard_of(specs.size(), 0);
  {
    uint64_t running = 0;
    size_t shard = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      shard_of[i] = shard;
      running += data[i].size();
      const size_t remaining_tensors = specs.size() - i - 1;
      const size_t remaining_shards = static_cast<size_t>(num_shards) - shard - 1;
      const bool full = running * num_shards >= total * (shard + 1);
      if (remaining_shards > 0 && (full || remaining_tensors == remaining_shards)) ++shard;
    }
  }

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  WeightsWritten written;
  written.tensors = static_cast<int64_t>(specs.size());
  written.bytes = total;
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < num_shards; ++s) {
    const std::string file =
        num_shards == 1 ? absl::StrCat(base, ".safetensors")
                        : absl::StrFormat("%s-%05d-of-%05d.safetensors", base, s + 1, num_shards);
    std::vector<sharding::TensorToWrite> tensors;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (shard_of[i] != static_cast<size_t>(s)) continue;
      tensors.push_back({specs[i].name, dtype, specs[i].shape, data[i].data()});
      weight_map[specs[i].name] = file;
    }
    RETURN_IF_ERROR(sharding::WriteSafetensors(JoinPath(dir, file), tensors, metadata));
    written.files.push_back(file);
  }
  if (num_shards > 1) {
    const std::string index = absl::StrCat(base, ".safetensors.index.json");
    nlohmann::json index_json = {{"metadata", {{"total_size", total}}},
                                 {"weight_map", weight_map}};
    RETURN_IF_ERROR(WriteFile(JoinPath(dir, index), ConfigJsonText(index_json)));
    written.files.push_back(index);
  }
  return written;
}

}  // namespace ditserve::tiny_model
