// Removing a folder tree. Our own walk (nftw) rather than std::filesystem::remove_all: the PyTorch
// wheel's libtorch.so exports its own copy of that function, which wins symbol resolution in a
// binary linking it and crashed there (a call through a null pointer, seen with PyTorch 2.11 on
// the GPU host: the tiny-model generator, then the LoRA benchmark's temporary folder). Torch-free.
//
// Thread-safety: concurrent calls on different paths are safe.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ditserve {

// Removes `path` and everything below it; symbolic links are removed, not followed, and a missing
// `path` is not an error. INTERNAL naming the entry that could not be removed.
absl::Status RemoveTree(const std::string& path);

}  // namespace ditserve
