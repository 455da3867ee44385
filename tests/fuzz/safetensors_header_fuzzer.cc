// libFuzzer target: ParseSafetensorsHeader (what SafetensorsFile::Open runs on a file's header
// bytes, from memory) must return a Status for any input, never crash, read out of bounds or hit
// undefined behaviour (built with -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "sharding/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view header(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> metadata;
  // The size of the data buffer after the header, chosen by the input's size (so the choice is part
  // of the input and each input is parsed once): a roomy buffer lets valid-looking headers reach
  // the deeper checks (sizes, overlap); the input's own size, or none, exercises the bounds checks.
  const uint64_t data_sizes[] = {uint64_t{1} << 40, static_cast<uint64_t>(size), uint64_t{0}};
  const uint64_t data_size = data_sizes[size % 3];
  auto tensors =
      ditserve::sharding::ParseSafetensorsHeader(header, data_size, "fuzz.safetensors", &metadata);
  if (tensors.ok()) {
    // Invariants a valid result must hold.
    for (const auto& t : *tensors) {
      if (t.end < t.begin || t.end > data_size) __builtin_trap();
      if (t.numel() * ditserve::sharding::DTypeSize(t.dtype) != t.nbytes()) __builtin_trap();
    }
  }
  return 0;
}
