// The JSON documents of a model folder, checked from memory: model_index.json, a component's
// config.json and a safetensors weights index. The file readers (ReadPipelineIndex,
// ReadComponentConfig, ComponentCheckpoint::Open) read the file, check its symbolic links and call
// these; the config fuzzer calls them on its input directly. Torch-free. Every error is
// INVALID_ARGUMENT (FAILED_PRECONDITION where a file is refused on purpose: quantized weights,
// pickle shards) naming `path` and the field. Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharding/pipeline_index.h"

namespace ditserve::sharding {

// model_index.json's object `j` (read from `path`) of the pipeline at `root`: "_class_name" (a
// string, required), components [library, class] in file order ([null, null]: absent, left out),
// other keys (options, "_diffusers_version", ...) ignored.
absl::StatusOr<PipelineIndex> ParsePipelineIndex(const nlohmann::json& j, const std::string& root,
                                                 const std::string& path);

// A component's config.json object: INVALID_ARGUMENT when "_class_name" is there and not a
// string; FAILED_PRECONDITION when it has a quantization_config (quantized checkpoints are not
// supported).
absl::Status CheckComponentConfig(const nlohmann::json& config, const std::string& path);

// A *.safetensors.index.json object: tensor -> shard file name from "weight_map". Each shard must
// be a plain file name (no folder) ending in .safetensors; the map must not be empty.
absl::StatusOr<std::map<std::string, std::string>> ParseWeightMap(const nlohmann::json& index,
                                                                  const std::string& path);

}  // namespace ditserve::sharding
