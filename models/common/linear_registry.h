// Every linear layer of a model by its module path ("transformer_blocks.0.attn.to_q"), as the
// model's ModuleLoader built it: what LoRA adapters (models/lora/) look their targets up in.
//
// Ownership: the pointers are borrowed; the layers belong to the model that owns the registry, and
// live exactly as long as it. Thread-safety: filled while the model is built, read-only after.
#pragma once

#include <map>
#include <string>

#include "models/common/linear_layer.h"

namespace ditserve::models {

class LinearRegistry {
 public:
  // A later Add of the same path replaces the earlier one (a model builds each layer once).
  void Add(const std::string& path, LinearLayer* layer) { layers_[path] = layer; }
  // The layer at `path`, or nullptr.
  LinearLayer* Find(const std::string& path) const {
    auto it = layers_.find(path);
    return it == layers_.end() ? nullptr : it->second;
  }
  const std::map<std::string, LinearLayer*>& layers() const { return layers_; }
  size_t size() const { return layers_.size(); }

 private:
  std::map<std::string, LinearLayer*> layers_;
};

}  // namespace ditserve::models
