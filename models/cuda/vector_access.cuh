// Vector loads and stores shared by the kernels of ditserve_cuda_kernels: N consecutive elements
// of T read or written as one access of sizeof(T)·N bytes (at most 16 for a single instruction;
// more compiles to several), and the host-side check that a pointer allows it. CUDA only.
#pragma once

#include <cstdint>

namespace ditserve::cuda {

// N consecutive elements, aligned as one access: *reinterpret_cast<const Vec<T, N>*>(p) loads them.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Whether `p` is aligned to `bytes` (a vector access of that size may start there).
inline bool AlignedTo(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace ditserve::cuda
