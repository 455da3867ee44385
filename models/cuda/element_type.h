// The element types our CUDA kernels take (torch-free; no CUDA headers, so LibTorch glue can
// include it in any build).
#pragma once

namespace ditserve::cuda {

enum class ElementType { kFloat32, kBFloat16, kFloat16 };

}  // namespace ditserve::cuda
