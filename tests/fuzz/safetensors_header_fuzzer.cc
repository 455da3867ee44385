// libFuzzer target: ParseSafetensorsHeader must return a Status for any input, never crash, read
// out of bounds or hit undefined behaviour (built with -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <string>

#include "sharding/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view header(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> metadata;
  // A roomy data buffer lets valid-looking headers reach the deeper checks (sizes, overlap); the
  // input's own size as buffer size exercises the bounds checks.
  for (uint64_t data_size : {uint64_t{1} << 40, static_cast<uint64_t>(size), uint64_t{0}}) {
    auto tensors = ditserve::sharding::ParseSafetensorsHeader(header, data_size, "fuzz.safetensors",
                                                              &metadata);
    if (tensors.ok()) {
      // Invariants a valid result must hold.
      for (const auto& t : *tensors) {
        if (t.end < t.begin || t.end > data_size) __builtin_trap();
        if (t.numel() * ditserve::sharding::DTypeSize(t.dtype) != t.nbytes()) __builtin_trap();
      }
    }
  }
  return 0;
}
