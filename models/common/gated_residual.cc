#include "models/common/gated_residual.h"

#include "models/common/fused_kernels.h"
#include "models/common/norm_modulate.h"

#ifdef DITSERVE_WITH_CUDA_KERNELS
#include "common/torch_compat.h"
#include "models/cuda/gated_residual.h"
#endif

namespace ditserve::models {

torch::Tensor GatedResidualReference(const torch::Tensor& x, const torch::Tensor& gate,
                                     const torch::Tensor& y) {
  return torch::addcmul(x, gate.unsqueeze(1), y);
}

#ifdef DITSERVE_WITH_CUDA_KERNELS
namespace {

// The kernel's arguments for x + gate·y written into `out` (the contract checked by
// GatedResidualFused).
cuda::GatedResidualArgs ResidualArgs(const torch::Tensor& x, const torch::Tensor& gate,
                                     const torch::Tensor& y, const torch::Tensor& out) {
  cuda::GatedResidualArgs a;
  KernelElementType(x.scalar_type(), &a.type);
  a.x = x.data_ptr();
  a.y = y.data_ptr();
  a.batch = x.size(0);
  a.tokens = x.size(1);
  a.dim = x.size(2);
  a.gate = gate.data_ptr();
  a.gate_stride_b = gate.stride(0);
  // addcmul's float32 arithmetic on CUDA, which depends on the PyTorch version (torch_compat.h).
  a.fused_multiply_add = compat::kCudaAddcmulIsFma;
  a.out = out.data_ptr();
  return a;
}

torch::Tensor EmptyContiguousLike(const torch::Tensor& x) {
  return torch::empty_like(x, x.options().memory_format(torch::MemoryFormat::Contiguous));
}

}  // namespace
#endif

bool GatedResidualFused(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  cuda::ElementType type;
  int64_t width = 0;
  if (!VectorRowsFit(x, &type, &width) || x.size(2) == 0) return false;
  if (y.device() != x.device() || y.scalar_type() != x.scalar_type() || y.sizes() != x.sizes() ||
      !y.is_contiguous() || !DataAligned16(y)) {
    return false;
  }
  return PerSampleVectorFits(gate, x, width);
#else
  (void)x;
  (void)gate;
  (void)y;
  return false;
#endif
}

torch::Tensor GatedResidual(const torch::Tensor& x, const torch::Tensor& gate,
                            const torch::Tensor& y) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  if (GatedResidualFused(x, gate, y)) {
    torch::Tensor out = EmptyContiguousLike(x);
    const cuda::GatedResidualArgs a = ResidualArgs(x, gate, y, out);
    LaunchOnDevice(x.device(), "gated_residual",
                   [&](void* stream) { return cuda::LaunchGatedResidual(a, stream); });
    return out;
  }
#endif
  return GatedResidualReference(x, gate, y);
}

bool GatedResidualNormModulateFused(const torch::Tensor& x, const torch::Tensor& gate,
                                    const torch::Tensor& y, const torch::Tensor& scale,
                                    const torch::Tensor& shift) {
  // The residual has x's shape, dtype and device and is contiguous and freshly allocated (aligned):
  // NormModulate's contract on it is its contract on x. One block per row: at most 2^31 - 1 rows.
  return GatedResidualFused(x, gate, y) && NormModulateFused(x, scale, shift) &&
         x.size(0) * x.size(1) <= 0x7fffffff;
}

std::pair<torch::Tensor, torch::Tensor> GatedResidualNormModulate(
    const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
    const torch::Tensor& scale, const torch::Tensor& shift, double eps) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  if (GatedResidualNormModulateFused(x, gate, y, scale, shift)) {
    torch::Tensor residual = EmptyContiguousLike(x);
    torch::Tensor normed = EmptyContiguousLike(x);
    cuda::GatedResidualNormModulateArgs a;
    a.residual = ResidualArgs(x, gate, y, residual);
    a.scale = scale.data_ptr();
    a.scale_stride_b = scale.stride(0);
    a.shift = shift.data_ptr();
    a.shift_stride_b = shift.stride(0);
    a.eps = static_cast<float>(eps);
    a.out = normed.data_ptr();
    LaunchOnDevice(x.device(), "gated_residual_norm_modulate",
                   [&](void* stream) { return cuda::LaunchGatedResidualNormModulate(a, stream); });
    return {residual, normed};
  }
#endif
  torch::Tensor residual = GatedResidual(x, gate, y);
  return {residual, NormModulate(residual, scale, shift, eps)};
}

}  // namespace ditserve::models
