// Helpers for the sharding tests: temporary folders and hand-made safetensors checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "sharding/safetensors.h"

namespace ditserve::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteTextFile(const std::string& path, const std::string& text);

// A safetensors file from raw pieces: u64 header length (`declared_len` when >= 0, else the real
// length), the header text, then `data`.
void WriteRawSafetensors(const std::string& path, const std::string& header,
                         const std::string& data, int64_t declared_len = -1);

// Writes CPU tensors (contiguous copies are made) as one safetensors file, in map order.
void WriteTorchSafetensors(const std::string& path,
                           const std::map<std::string, torch::Tensor>& tensors);

// A component folder: config.json plus diffusion_pytorch_model.safetensors.
void WriteComponent(const std::string& dir, const nlohmann::json& config,
                    const std::map<std::string, torch::Tensor>& tensors);

}  // namespace ditserve::testing
