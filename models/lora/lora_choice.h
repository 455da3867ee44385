// What a request asks of the LoRA adapters loaded at start: a name and the weight it is applied
// with (diffusers' set_adapters(names, adapter_weights)). Plain value.
#pragma once

#include <string>

namespace ditserve::lora {

// The largest |scale| a worker applies; the frontend's --max-lora-scale may not exceed it.
inline constexpr float kMaxLoraScale = 8.0f;

struct LoraChoice {
  std::string name;
  float scale = 1.0f;
  bool operator==(const LoraChoice& o) const { return name == o.name && scale == o.scale; }
};

}  // namespace ditserve::lora
