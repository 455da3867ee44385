// Whether this process uses ditserve's own CUDA kernels (models/cuda) where their contracts hold:
// true in the CUDA build (DITSERVE_WITH_CUDA_KERNELS) unless DITSERVE_FUSED_KERNELS=0 is in the
// environment (read once per process; the A/B switch of the benchmarks and of the parity runs).
// Elsewhere every fused op runs its reference op sequence.
#pragma once

#include <torch/torch.h>

#include "models/cuda/element_type.h"

namespace ditserve::models {

bool FusedKernelsEnabled();

// The kernels' element type for a tensor dtype (float32, bfloat16, float16); false for others.
bool KernelElementType(torch::ScalarType t, cuda::ElementType* out);

}  // namespace ditserve::models
