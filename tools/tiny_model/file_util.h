// Small file helpers for the tiny-model generator: whole-file writes and JSON in the layout the
// Hugging Face libraries write (`json.dumps(obj, indent=2, sort_keys=True) + "\n"`). Torch-free.
//
// Thread-safety: stateless functions; concurrent calls on different paths are safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "common/remove_tree.h"

namespace ditserve::tiny_model {

// Writes `content` to `path` (truncating). INTERNAL naming the path on any I/O error.
absl::Status WriteFile(const std::string& path, const std::string& content);

// Indent 2, keys sorted (nlohmann::json keeps object keys sorted), non-ASCII kept as UTF-8, and a
// final newline: byte-for-byte what diffusers' and transformers' save_pretrained write for ASCII
// configs.
std::string ConfigJsonText(const nlohmann::json& config);

// RemoveTree: common/remove_tree.h.

// `dir`/`name`.
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace ditserve::tiny_model
