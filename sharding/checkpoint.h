// Discovery of one diffusers / transformers model component folder (the diffusers checkpoint layout: pipeline_utils.py, modeling_utils.py). Torch-free.
//
// A component folder holds config.json and its weights as either
//   * one file: diffusion_pytorch_model.safetensors (diffusers) or model.safetensors (transformers);
//   * shards plus an index: diffusion_pytorch_model.safetensors.index.json / model.safetensors.index.json
//     = {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>"}};
//   * failing those, exactly one other "*.safetensors.index.json" or "*.safetensors" (a variant).
// The index wins when present, and its weight_map keys are the complete tensor list (as diffusers).
// Open() refuses, with an error naming the file: a missing or malformed config.json, a
// `quantization_config` in it, pickle weights (.bin / .pt / .ckpt / .pth) with no safetensors next to
// them, a shard the index names that does not exist (or is not a plain file name), a weight_map
// tensor that its shard does not contain, and any corrupt safetensors header. Only headers are read.
//
// Ownership: owns every opened SafetensorsFile; TensorLocation pointers live as long as the
// ComponentCheckpoint. Thread-safety: immutable after Open(); concurrent reads are safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sharding/safetensors.h"

namespace ditserve::sharding {

struct TensorLocation {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
};

class ComponentCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<ComponentCheckpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // config.json's "_class_name" ("" when absent).
  const std::string& class_name() const { return class_name_; }
  // The index file used ("" for a single-file checkpoint) and the weight files, as full paths.
  const std::string& index_file() const { return index_file_; }
  std::vector<std::string> weight_files() const;
  // Every tensor of the component, by name.
  const std::map<std::string, TensorLocation>& tensors() const { return tensors_; }
  // NOT_FOUND naming the component folder when absent.
  absl::StatusOr<TensorLocation> Find(const std::string& name) const;
  // Sum of the stored bytes of every tensor.
  uint64_t total_bytes() const;

 private:
  ComponentCheckpoint() = default;
  std::string dir_;
  nlohmann::json config_;
  std::string class_name_;
  std::string index_file_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorLocation> tensors_;
};

// Reads and validates "<dir>/config.json": a JSON object without quantization_config.
absl::StatusOr<nlohmann::json> ReadComponentConfig(const std::string& dir);

}  // namespace ditserve::sharding
