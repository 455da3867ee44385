// Where a LoRA adapter's weights are on disk: the one rule the workers (lora_adapter.h, which read
// them) and the frontend (--lora / --lora-dir, which checks them at start) share. Torch-free.
//
// A path names an adapter when it is a .safetensors file, or a folder holding
// pytorch_lora_weights.safetensors (diffusers' save_lora_weights), else adapter_model.safetensors
// (PEFT's save_pretrained, with adapter_config.json beside it), else exactly one .safetensors file.
// Thread-safety: stateless (reads the file system).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ditserve::lora {

// The adapter file of folder `dir`. NOT_FOUND whose message says what the folder lacks
// ("it holds no .safetensors files and no pytorch_lora_weights.safetensors or
// adapter_model.safetensors", "... several ...", or "cannot list it: <reason>").
absl::StatusOr<std::string> AdapterFileInFolder(const std::string& dir);

// `path` itself when it is a file, else AdapterFileInFolder(path); NOT_FOUND naming the path.
absl::StatusOr<std::string> ResolveLoraFile(const std::string& path);

}  // namespace ditserve::lora
